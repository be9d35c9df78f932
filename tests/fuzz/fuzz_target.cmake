# Included by each fuzz folder. libFuzzer targets (clang only: tools/fuzz configures a separate clang build with
# FETCHCOST_SANITIZE=ON). fc_fuzz_target(NAME SOURCES … [LIBS …]) builds one with ASan+UBSan and
# registers it under ctest label `fuzz`, running FC_FUZZ_SECONDS from the committed seeds in
# <folder>/corpus/<NAME>/ (fresh inputs go to the build tree; the seeds are read only).
set(FC_FUZZ_SECONDS 45 CACHE STRING "Seconds each fuzz target runs under ctest")

function(fc_fuzz_target name)
  cmake_parse_arguments(F "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${F_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/userspace ${PROJECT_SOURCE_DIR}/tests/fuzz)
  target_link_libraries(${name} PRIVATE ${F_LIBS})
  target_compile_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined
                                         -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  set(work ${CMAKE_CURRENT_BINARY_DIR}/corpus/${name})
  file(MAKE_DIRECTORY ${work})
  add_test(NAME ${name}
           COMMAND ${name} -max_total_time=${FC_FUZZ_SECONDS} -rss_limit_mb=2048 -timeout=10
                   -print_final_stats=1 ${work} ${CMAKE_CURRENT_SOURCE_DIR}/corpus/${name})
  set_tests_properties(${name} PROPERTIES LABELS fuzz TIMEOUT 0)
endfunction()
