# Run at build time (cmake -P): write SRC (an MJCF file) into OUT as a C
# string, `const char NAME[]` (NUL-terminated) and `const int NAME_size`
# (bytes, without the NUL). Invoked by mj_embed_model in CMakeLists.txt,
# which re-runs it whenever the XML changes.
file(READ "${SRC}" _hex HEX)
string(LENGTH "${_hex}" _len)
math(EXPR _size "${_len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," _bytes "${_hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n    " _bytes "${_bytes}")
file(WRITE "${OUT}.tmp"
  "/* Generated from ${SRC} by envs/mujoco/embed_model.cmake; do not edit. */\n"
  "const char ${NAME}[] = {\n    ${_bytes}0x00\n};\n"
  "const int ${NAME}_size = ${_size};\n")
file(RENAME "${OUT}.tmp" "${OUT}")
