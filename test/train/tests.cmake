# Models, synthetic data, the loader, checkpoints, the trainer, and gridnn-train against
# PyTorch (test/parity/make_train_fixtures.py).
gridnn_add_test(test_train_models LABEL unit SOURCES train/test_models.cpp)
gridnn_add_test(test_train_data LABEL unit SOURCES train/test_synthetic_loader.cpp)
gridnn_add_test(test_train_checkpoint LABEL unit SOURCES train/test_checkpoint.cpp)
gridnn_add_test(test_train_trainer LABEL unit SOURCES train/test_trainer.cpp)
gridnn_add_test(test_train_parity LABEL unit SOURCES train/test_train_parity.cpp)
target_compile_definitions(test_train_parity PRIVATE GRIDNN_TRAIN_EXE="$<TARGET_FILE:gridnn-train>")
add_dependencies(test_train_parity gridnn-train)
gridnn_add_test(test_gpu_train LABEL gpu SOURCES gpu/test_gpu_train.cpp)
gridnn_add_test(test_train_cli LABEL unit SOURCES train/test_cli.cpp)
target_compile_definitions(test_train_cli PRIVATE GRIDNN_TRAIN_EXE="$<TARGET_FILE:gridnn-train>")
add_dependencies(test_train_cli gridnn-train)
