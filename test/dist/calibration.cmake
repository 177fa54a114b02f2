# The cost model's calibration (parallel/calibration.h): α–β fit, JSON file, measured
# compute in the cost model. Single process, label unit.
gridnn_add_test(test_calibration LABEL unit SOURCES dist/test_calibration.cpp)
