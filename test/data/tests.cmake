# NIfTI volumes, CSV manifests and NiftiDataset, on small files the tests write
# (test/data/nifti_writer.h) and on mricron's ch2bet.nii.gz when it is installed.
gridnn_add_test(test_data_nifti LABEL unit SOURCES
  data/test_nifti_volume.cpp
  data/test_manifest.cpp
  data/test_nifti_dataset.cpp
  data/nifti_writer.cpp)
gridnn_add_test(test_data_nifti_training LABEL unit SOURCES
  data/test_nifti_training.cpp
  data/nifti_writer.cpp)
