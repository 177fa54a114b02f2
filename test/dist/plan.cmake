# The α–β cost model and gridnn-plan (DESIGN §6): single-process, label unit.
gridnn_add_test(test_cost_model LABEL unit SOURCES dist/test_cost_model.cpp)

# The paper's AlexNet setting at P = 32: the planner must pick 8 x 4.
add_test(NAME gridnn_plan_alexnet
         COMMAND gridnn-plan --model alexnet --procs 32 --batch 2048 --alpha 2e-6
                 --bandwidth 6e9)
set_tests_properties(gridnn_plan_alexnet PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "best: 8x4")
