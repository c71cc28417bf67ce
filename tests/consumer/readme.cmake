# Turns README.md's C++ blocks into programs, so the consumer test builds and runs them against
# the installed package as a reader would. Included by run.cmake with README and OUT_DIR set.
#
# A block with its own `int main` is a whole program (readme_program_<n>.cpp). The other blocks
# are what the README says they are: the body of a main that starts with
# `#include <xgrad/xgrad.hpp>` and `using namespace xgrad;`, each in its own scope, with the
# classes they define above main. They go into one program, readme_snippets.cpp, in README order.
# A block preceded by the line `<!-- readme: not compiled -->` is left out.
file(READ ${README} text)
# CMake lists split at ';' and nest at '[' ']': hide them while slicing the text.
string(REPLACE ";" "@SEMI@" text "${text}")
string(REPLACE "[" "@LB@" text "${text}")
string(REPLACE "]" "@RB@" text "${text}")
string(REPLACE "\\" "@BS@" text "${text}")
string(REGEX MATCHALL "(<!-- readme: not compiled -->\n)?```cpp\n[^`]*```" blocks "${text}")

macro(restore var)
  string(REPLACE "@SEMI@" ";" ${var} "${${var}}")
  string(REPLACE "@LB@" "[" ${var} "${${var}}")
  string(REPLACE "@RB@" "]" ${var} "${${var}}")
  string(REPLACE "@BS@" "\\" ${var} "${${var}}")
endmacro()

set(top "")
set(body "")
set(n 0)
set(programs 0)
foreach(block IN LISTS blocks)
  math(EXPR n "${n} + 1")
  if(block MATCHES "^<!-- readme: not compiled -->")
    continue()
  endif()
  string(REGEX REPLACE "^```cpp\n" "" code "${block}")
  string(REGEX REPLACE "```$" "" code "${code}")
  if(code MATCHES "int main\\(")
    restore(code)
    file(WRITE ${OUT_DIR}/readme_program_${n}.cpp "// README.md, C++ block ${n}\n${code}")
    math(EXPR programs "${programs} + 1")
    continue()
  endif()
  # Split the block into lines; a class or struct at column 0 runs to its `};` and goes above
  # main, every other line into this block's scope in main.
  string(REPLACE "\n" ";" lines "${code}")
  set(in_decl FALSE)
  set(block_body "")
  foreach(line IN LISTS lines)
    if(NOT in_decl AND line MATCHES "^(class|struct|template) ")
      set(in_decl TRUE)
    endif()
    if(in_decl)
      string(APPEND top "${line}\n")
      if(line MATCHES "^}@SEMI@")   # `};`, its semicolon hidden above
        set(in_decl FALSE)
      endif()
    else()
      string(APPEND block_body "    ${line}\n")
    endif()
  endforeach()
  if(block_body MATCHES "[^ \n]")
    string(APPEND body "    {   // README.md, C++ block ${n}\n${block_body}    }\n")
  endif()
endforeach()
restore(top)
restore(body)
file(WRITE ${OUT_DIR}/readme_snippets.cpp
  "// README.md's snippets, each in its own scope, as the README says they are meant.\n"
  "#include <xgrad/xgrad.hpp>\nusing namespace xgrad;\n\n${top}\nint main() {\n${body}    return 0;\n}\n")
message(STATUS "README.md: ${n} C++ blocks, ${programs} whole programs, the rest in readme_snippets.cpp")
