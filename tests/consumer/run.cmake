# ctest driver: install the built xgrad into a scratch prefix, then configure, build and run
# the consumer against it. Arguments: -DBUILD_DIR= -DSOURCE_DIR= -DWORK_DIR=, and
# -DCXX_FLAGS= (the library's own CMAKE_CXX_FLAGS: a sanitizer build needs them at link time),
# -DEXPECT_DISTRIBUTED=ON|OFF (the library was built with MPI: the consumer must get it).
file(REMOVE_RECURSE ${WORK_DIR})
macro(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test: '${ARGN}' failed with ${rc}")
  endif()
endmacro()
# Installed as a packager stages it, for a prefix with a space and a non-ASCII letter, under
# DESTDIR, and used from there: the package must work wherever its tree ends up.
set(ENV{DESTDIR} ${WORK_DIR}/stage)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix "/opt/x grad ü")
unset(ENV{DESTDIR})
set(PREFIX "${WORK_DIR}/stage/opt/x grad ü")
# Nor may it name the tree it was built from.
file(GLOB_RECURSE installed_text "${PREFIX}/*.cmake" "${PREFIX}/*.hpp")
foreach(file IN LISTS installed_text)
  file(READ "${file}" text)
  foreach(tree IN ITEMS "${SOURCE_DIR}" "${BUILD_DIR}")
    string(FIND "${text}" "${tree}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "consumer test: the installed ${file} names ${tree}, where xgrad was built")
    endif()
  endforeach()
endforeach()
set(README ${SOURCE_DIR}/README.md)
set(OUT_DIR ${WORK_DIR}/readme)
file(MAKE_DIRECTORY ${OUT_DIR})
include(${CMAKE_CURRENT_LIST_DIR}/readme.cmake)
# CMAKE_CXX_STANDARD 14: as a program built by a compiler whose default is C++14 (clang 14), which
# must get the C++17 the headers need from the package.
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build -DCMAKE_CXX_STANDARD=14
    "-DCMAKE_PREFIX_PATH=${PREFIX}" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
    -DWANT_DISTRIBUTED=${EXPECT_DISTRIBUTED} -DREADME_DIR=${OUT_DIR})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)
# A program built with _GLIBCXX_DEBUG must not link to an xgrad built without it (their containers
# differ in layout), and the linker's message must name why.
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build --target consumer_glibcxx_debug
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0 OR NOT out MATCHES "xgrad_this_program_has_GLIBCXX_DEBUG_and_xgrad_must_too")
  message(FATAL_ERROR "consumer test: a program built with _GLIBCXX_DEBUG against xgrad built without it "
                      "gave ${rc} and not the missing symbol that names the mismatch:\n${out}")
endif()
run(${WORK_DIR}/build/consumer_plugin_host)
# In a sanitizer build, LeakSanitizer reads one suppressions file: README's programs draw with
# Graphviz and one of them runs MPI, and both keep allocations until exit, so the suite's list and
# the MPI tests' list are joined (each names only those libraries' allocations).
file(READ ${SOURCE_DIR}/tests/lsan.supp suite_supp)
file(READ ${SOURCE_DIR}/tests/distributed/lsan.supp mpi_supp)
file(WRITE ${WORK_DIR}/lsan.supp "${suite_supp}${mpi_supp}")
set(ENV{LSAN_OPTIONS} "suppressions=${WORK_DIR}/lsan.supp:fast_unwind_on_malloc=0:print_suppressions=0")
# README's programs run in a folder of their own: their snippets write model.npz and the like.
file(GLOB readme_programs RELATIVE ${OUT_DIR} ${OUT_DIR}/*.cpp)
foreach(source IN LISTS readme_programs)
  string(REGEX REPLACE "\\.cpp$" "" program "${source}")
  if(EXISTS ${WORK_DIR}/build/${program})
    execute_process(COMMAND ${WORK_DIR}/build/${program} WORKING_DIRECTORY ${OUT_DIR}
                    RESULT_VARIABLE rc OUTPUT_QUIET)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "consumer test: README's ${source} failed with ${rc}")
    endif()
  endif()
endforeach()
if(EXPECT_DISTRIBUTED)
  run(${WORK_DIR}/build/consumer_distributed)
endif()
# The build folder used as the package, as a program pointed at it finds it.
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer/build_tree -B ${WORK_DIR}/build_tree
    -Dxgrad_DIR=${BUILD_DIR} -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}")
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build_tree)
run(${WORK_DIR}/build_tree/build_tree_consumer)
