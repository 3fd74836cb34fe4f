# Our code builds with warnings as errors; foreign headers are included as SYSTEM by their targets.
function(bpftrain_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
endfunction()

# bpftrain_test(NAME name SOURCES ... LIBS ... LABELS unit|bpf|e2e|numalab|bench [TIMEOUT s])
# builds a GoogleTest binary and registers it with ctest under its labels.
function(bpftrain_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  bpftrain_target_defaults(${T_NAME})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main GTest::gmock)
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "BPFTRAIN_BUILD_DIR=${PROJECT_BINARY_DIR};BPFTRAIN_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()
