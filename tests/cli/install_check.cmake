# `cmake --install` into a fresh prefix, then the installed binary runs.
# Run as: cmake -DBUILD_DIR=... -DPREFIX=... -DBINDIR=bin -DDOCDIR=share/doc/pagecheck -P install_check.cmake
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc}): ${out}${err}")
endif()
foreach(installed "${BINDIR}/pagecheck" "${DOCDIR}/README.md" "${DOCDIR}/docs/cli.md" "${DOCDIR}/docs/tolerances.md")
  if(NOT EXISTS "${PREFIX}/${installed}")
    message(FATAL_ERROR "cmake --install did not install ${installed} under ${PREFIX}")
  endif()
endforeach()
execute_process(COMMAND "${PREFIX}/${BINDIR}/pagecheck" --version RESULT_VARIABLE rc OUTPUT_VARIABLE version)
if(NOT rc EQUAL 0 OR NOT version MATCHES "^pagecheck ")
  message(FATAL_ERROR "the installed pagecheck --version gave ${rc}: ${version}")
endif()
message(STATUS "installed into ${PREFIX}: ${version}")
file(REMOVE_RECURSE "${PREFIX}")
