# fc_bpf_object(NAME name SOURCE file.bpf.c)
# Compiles one BPF program with clang -target bpf (CO-RE, BTF), links it with
# `bpftool gen object` and generates `<name>.skel.h` into the build tree. Defines the
# interface library `<name>_skel` that carries the include path and libbpf.
# In the spirit of libbpf-bootstrap's bpf_object().
find_program(BPF_CLANG NAMES clang clang-14 REQUIRED)
find_program(BPFTOOL NAMES bpftool PATHS /usr/sbin /usr/local/sbin REQUIRED)

if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(BPF_TARGET_ARCH x86)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  set(BPF_TARGET_ARCH arm64)
else()
  message(FATAL_ERROR "fetchcost's BPF programs support x86_64 and arm64, not ${CMAKE_SYSTEM_PROCESSOR}")
endif()

function(fc_bpf_object)
  cmake_parse_arguments(B "" "NAME;SOURCE" "DEPENDS" ${ARGN})
  set(out ${CMAKE_CURRENT_BINARY_DIR}/${B_NAME})
  set(src ${CMAKE_CURRENT_SOURCE_DIR}/${B_SOURCE})
  add_custom_command(
    OUTPUT ${out}.bpf.o ${out}.skel.h
    COMMAND ${BPF_CLANG} -g -O2 -target bpf -D__TARGET_ARCH_${BPF_TARGET_ARCH}
            -I${CMAKE_CURRENT_SOURCE_DIR}/include -I${CMAKE_CURRENT_SOURCE_DIR}
            -idirafter /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}
            -Wall -Wno-unused-function -c ${src} -o ${out}.tmp.bpf.o
    COMMAND ${BPFTOOL} gen object ${out}.bpf.o ${out}.tmp.bpf.o
    COMMAND ${BPFTOOL} gen skeleton ${out}.bpf.o name ${B_NAME} > ${out}.skel.h
    DEPENDS ${src} ${B_DEPENDS}
    COMMENT "BPF ${B_NAME}: compile, link, skeleton"
    VERBATIM)
  add_custom_target(${B_NAME}_skel_gen DEPENDS ${out}.skel.h)
  add_library(${B_NAME}_skel INTERFACE)
  add_dependencies(${B_NAME}_skel ${B_NAME}_skel_gen)
  target_include_directories(${B_NAME}_skel INTERFACE ${CMAKE_CURRENT_BINARY_DIR})
  target_link_libraries(${B_NAME}_skel INTERFACE PkgConfig::LIBBPF)
endfunction()
