# fc_add_subdirectories(DIR): add_subdirectory() for every child of DIR that has a CMakeLists.txt,
# in name order, so parallel work on separate folders never edits a shared list.
# -DFETCHCOST_SKIP="userspace/objstore;tests/unit/objstore" leaves folders out of a local build.
function(fc_add_subdirectories dir)
  file(GLOB children RELATIVE ${CMAKE_CURRENT_SOURCE_DIR}/${dir} CONFIGURE_DEPENDS
       ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/*/CMakeLists.txt)
  list(SORT children)
  foreach(child ${children})
    get_filename_component(sub ${child} DIRECTORY)
    file(RELATIVE_PATH from_top ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/${sub})
    if(NOT from_top IN_LIST FETCHCOST_SKIP)
      add_subdirectory(${dir}/${sub})
    endif()
  endforeach()
endfunction()

# fc_test(NAME name LABEL unit|kernel|e2e|fuzz|bench SOURCES ... [LIBS ...] [TIMEOUT s])
# A doctest executable registered with ctest under one label. Exit code 77 means "skipped"
# (only ever returned outside CI: under CI=true a missing privilege is a failure).
function(fc_test)
  cmake_parse_arguments(T "" "NAME;LABEL;TIMEOUT" "SOURCES;LIBS;ARGS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE fc_testing ${T_LIBS})
  add_test(NAME ${T_NAME} COMMAND ${T_NAME} ${T_ARGS})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS ${T_LABEL} TIMEOUT ${T_TIMEOUT}
                       SKIP_RETURN_CODE 77)
endfunction()
