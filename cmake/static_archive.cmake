# Builds libsluice.a (run with cmake -P by cmake/libsluice.cmake): links every object of
# ARCHIVES into one relocatable object, keeps global only the symbols SHARED (libsluice.so)
# exports, and archives that object as OUTPUT. Inputs: LINKER OBJCOPY NM AR RANLIB ARCHIVES
# (separated by "|") SHARED OUTPUT WORK_DIR.
string(REPLACE "|" ";" ARCHIVES "${ARCHIVES}")
file(MAKE_DIRECTORY ${WORK_DIR})
set(object ${WORK_DIR}/sluice.o)
set(keep ${WORK_DIR}/public-symbols.txt)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${ARGN}: ${rc}\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

run(${LINKER} -r -o ${object} --whole-archive ${ARCHIVES} --no-whole-archive)

# The public API: the defined dynamic symbols of the shared library.
run(${NM} -D --defined-only --format=posix ${SHARED})
string(REPLACE "\n" ";" lines "${run_output}")
set(names "")
foreach(line ${lines})
  if(line MATCHES "^(sluice_[a-z0-9_]+) [TDBR] ")
    string(APPEND names "${CMAKE_MATCH_1}\n")
  endif()
endforeach()
if(names STREQUAL "")
  message(FATAL_ERROR "${SHARED} exports no sluice_ symbol")
endif()
file(WRITE ${keep} "${names}")
run(${OBJCOPY} --keep-global-symbols=${keep} ${object})

file(REMOVE ${OUTPUT})
run(${AR} qc ${OUTPUT} ${object})
run(${RANLIB} ${OUTPUT})
