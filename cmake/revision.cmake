# Writes OUT with keel's git revision ("+dirty" for local edits to tracked files) and a hash of
# keel's sources: every *.cpp, *.h, *.def and *.in under DIRS (comma-separated, relative to SRC;
# an entry may also name one file), by path and content. Two builds of different code never
# share a stamp, even when both are "<sha>+dirty". OUT is touched only when its text changes, so
# every build stamps the bundle without needless rebuilds.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE rev OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT rev)
  set(rev "unknown")
elseif(dirty)
  string(APPEND rev "+dirty")
endif()

string(REPLACE "," ";" dirs "${DIRS}")
if(NOT dirs)
  message(FATAL_ERROR "revision.cmake: DIRS names no source folders")
endif()
set(sources)
foreach(dir IN LISTS dirs)
  if(IS_DIRECTORY ${SRC}/${dir})
    file(GLOB_RECURSE found RELATIVE ${SRC} ${SRC}/${dir}/*.cpp ${SRC}/${dir}/*.h
         ${SRC}/${dir}/*.def ${SRC}/${dir}/*.in)
    list(APPEND sources ${found})
  elseif(EXISTS ${SRC}/${dir})
    list(APPEND sources ${dir})
  else()
    message(FATAL_ERROR "revision.cmake: ${SRC}/${dir} does not exist")
  endif()
endforeach()
list(REMOVE_DUPLICATES sources)
list(SORT sources)
set(listing "")
foreach(f IN LISTS sources)
  file(SHA256 ${SRC}/${f} h)
  string(APPEND listing "${f} ${h}\n")
endforeach()
string(SHA256 digest "${listing}")
string(SUBSTRING ${digest} 0 16 digest)

set(text "#pragma once\n#define KEEL_GIT_REVISION \"${rev}\"\n#define KEEL_SOURCE_HASH \"${digest}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE ${OUT} "${text}")
endif()
