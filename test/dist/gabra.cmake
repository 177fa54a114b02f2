# Pipeline placement (GABRA, DESIGN §7): the simulator, the JSON files, the searches.
gridnn_add_test(test_gabra LABEL unit SOURCES dist/test_gabra.cpp)

# gridnn-place end to end on its own example files, and on a corrupt profile.
set(GRIDNN_PLACE_DIR ${CMAKE_CURRENT_BINARY_DIR}/gridnn_place)
file(MAKE_DIRECTORY ${GRIDNN_PLACE_DIR})
file(WRITE ${GRIDNN_PLACE_DIR}/corrupt_profile.json
     "{\"micro_batches\": 4, \"blocks\": [{\"name\": \"stem\", \"forward_s\": 0.1}]}\n")
add_test(NAME gridnn_place_write_examples
         COMMAND gridnn-place --example-profile ${GRIDNN_PLACE_DIR}/profile.json
                 --example-cluster ${GRIDNN_PLACE_DIR}/cluster.json)
set_tests_properties(gridnn_place_write_examples PROPERTIES LABELS unit
                     FIXTURES_SETUP gridnn_place_examples)
add_test(NAME gridnn_place_examples
         COMMAND gridnn-place --profile ${GRIDNN_PLACE_DIR}/profile.json
                 --cluster ${GRIDNN_PLACE_DIR}/cluster.json --partitions 4
                 --out ${GRIDNN_PLACE_DIR}/placement.json)
set_tests_properties(gridnn_place_examples PROPERTIES LABELS unit
                     FIXTURES_REQUIRED gridnn_place_examples
                     PASS_REGULAR_EXPRESSION "gabra .*exhaustive .*\\+0\\.000%.*wrote ")
add_test(NAME gridnn_place_corrupt_profile
         COMMAND gridnn-place --profile ${GRIDNN_PLACE_DIR}/corrupt_profile.json
                 --cluster ${GRIDNN_PLACE_DIR}/cluster.json)
set_tests_properties(gridnn_place_corrupt_profile PROPERTIES LABELS unit
                     FIXTURES_REQUIRED gridnn_place_examples
                     PASS_REGULAR_EXPRESSION "corrupt_profile.json: blocks\\[0\\]\\.backward_s is missing")
add_test(NAME gridnn_place_corrupt_profile_exit
         COMMAND gridnn-place --profile ${GRIDNN_PLACE_DIR}/corrupt_profile.json
                 --cluster ${GRIDNN_PLACE_DIR}/cluster.json)
set_tests_properties(gridnn_place_corrupt_profile_exit PROPERTIES LABELS unit
                     FIXTURES_REQUIRED gridnn_place_examples WILL_FAIL TRUE)
