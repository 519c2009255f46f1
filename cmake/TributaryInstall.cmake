# The SDK: what `cmake --install build --prefix P` puts under P. Each layer's
# CMakeLists declares its own public part with the two functions below; the
# top-level CMakeLists calls trib_install_finish() once, after every layer.
#
#   trib_install_library(<target> [NAME <export-name>] [HEADERS <h>...])
#       The static library <target> goes to P/lib and into the export set
#       TributaryTargets as Tributary::<export-name> (default: <target>
#       without its "trib_" prefix: trib_rpc -> Tributary::rpc). HEADERS
#       (paths relative to the layer's folder) go to
#       P/include/tributary/<layer>/, so `#include "rpc/rpc.h"` reads the
#       same in the tree and installed. Headers not listed stay internal.
#       The target's objects also go into libtributary.so / libtributary.a
#       (Tributary::tributary / Tributary::tributary_static), and its
#       external link dependencies into tributary.pc.
#   trib_install_program(<target>...)
#       Programs to P/bin (exported as Tributary::<target>).
#
# Layout:
#   P/include/tributary/tributary.h            umbrella header (every public header)
#   P/include/tributary/<layer>/*.h            public headers, include root P/include/tributary
#   P/lib/libtributary.{so,a}                  every installed layer in one library
#   P/lib/libtrib_<layer>.a                    one archive per layer (Tributary::<layer>)
#   P/lib/pkgconfig/tributary.pc               cc prog.c $(pkg-config --cflags --libs tributary)
#   P/lib/cmake/Tributary/tributary-config.cmake   find_package(Tributary) (or tributary)
#   P/bin/tributary-*, trib-env
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TRIB_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/tributary)
set(TRIB_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/Tributary)

# Installed programs and libtributary.so find their CUDA libraries (outside
# the loader's default path) and libtributary.so itself.
set(CMAKE_INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
set(CMAKE_INSTALL_RPATH_USE_LINK_PATH ON)

function(trib_install_library target)
  cmake_parse_arguments(L "" "NAME" "HEADERS" ${ARGN})
  if(NOT L_NAME)
    string(REGEX REPLACE "^trib_" "" L_NAME ${target})
  endif()
  file(RELATIVE_PATH _layer ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  foreach(h ${L_HEADERS})
    get_filename_component(_dir ${h} DIRECTORY)
    install(FILES ${h} DESTINATION ${TRIB_INSTALL_INCLUDEDIR}/${_layer}/${_dir})
    set_property(GLOBAL APPEND PROPERTY TRIB_PUBLIC_HEADERS ${_layer}/${h})
  endforeach()
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${L_NAME})
  target_include_directories(${target} INTERFACE
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}> $<INSTALL_INTERFACE:${TRIB_INSTALL_INCLUDEDIR}>)
  # An instrumented archive needs the sanitizer runtimes wherever it is linked.
  if(TRIB_SANITIZE)
    target_link_options(${target} INTERFACE -fsanitize=address,undefined)
  elseif(TRIB_TSAN)
    target_link_options(${target} INTERFACE -fsanitize=thread)
  endif()
  install(TARGETS ${target} EXPORT TributaryTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  set_property(GLOBAL APPEND PROPERTY TRIB_INSTALLED_LIBS ${target})
endfunction()

function(trib_install_program)
  foreach(t ${ARGN})
    install(TARGETS ${t} EXPORT TributaryTargets RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endforeach()
endfunction()

# The link flags of one external dependency, for tributary.pc.
function(_trib_pc_flags item out)
  set(_flags "")
  if(item MATCHES "^PkgConfig::(.*)$")
    set(_p ${CMAKE_MATCH_1})
    foreach(d ${${_p}_LIBRARY_DIRS})
      list(APPEND _flags "-L${d}")
    endforeach()
    foreach(l ${${_p}_LIBRARIES})
      list(APPEND _flags "-l${l}")
    endforeach()
  elseif(item STREQUAL "Threads::Threads")
    list(APPEND _flags "-pthread")
  elseif(item MATCHES "^CUDA::(.*)$")
    get_target_property(_loc ${item} IMPORTED_LOCATION)
    get_filename_component(_d ${_loc} DIRECTORY)
    list(APPEND _flags "-L${_d}" "-l${CMAKE_MATCH_1}")
  elseif(item STREQUAL "mujoco::mujoco")   # MuJoCo's config package: libmujoco
    list(APPEND _flags "-lmujoco")
  elseif(TARGET ${item})
    message(FATAL_ERROR "tributary.pc: no flags known for target ${item}")
  elseif(item MATCHES "^-" OR IS_ABSOLUTE "${item}")   # a flag, or a library by its full path
    list(APPEND _flags ${item})
  else()
    list(APPEND _flags "-l${item}")
  endif()
  set(${out} ${_flags} PARENT_SCOPE)
endfunction()

function(trib_install_finish)
  get_property(_libs GLOBAL PROPERTY TRIB_INSTALLED_LIBS)
  get_property(_headers GLOBAL PROPERTY TRIB_PUBLIC_HEADERS)

  # External dependencies of the installed layers (ours filtered out), in order.
  set(_ext "")
  foreach(l ${_libs})
    get_target_property(_deps ${l} LINK_LIBRARIES)
    if(NOT _deps)
      continue()
    endif()
    foreach(d ${_deps})
      list(FIND _libs ${d} _ours)
      if(_ours EQUAL -1 AND NOT d MATCHES "^\\$<")
        list(APPEND _ext ${d})
      endif()
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES _ext)

  # libtributary.so and libtributary.a: every installed layer's objects.
  set(_objs "")
  foreach(l ${_libs})
    list(APPEND _objs $<TARGET_OBJECTS:${l}>)
  endforeach()
  add_library(tributary SHARED ${_objs})
  add_library(tributary_static STATIC ${_objs})
  set_target_properties(tributary_static PROPERTIES OUTPUT_NAME tributary)
  set_target_properties(tributary PROPERTIES LINKER_LANGUAGE C
    VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  # Only what the public headers declare is exported (cmake/tributary.map,
  # written by scripts/gen-exports; test_exports checks both).
  target_link_options(tributary PRIVATE "-Wl,--version-script=${PROJECT_SOURCE_DIR}/cmake/tributary.map")
  set_property(TARGET tributary APPEND PROPERTY LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/tributary.map)
  foreach(t tributary tributary_static)
    target_link_libraries(${t} PUBLIC ${_ext})
    target_include_directories(${t} INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
      $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include> $<INSTALL_INTERFACE:${TRIB_INSTALL_INCLUDEDIR}>)
    get_target_property(_defs trib_tensor INTERFACE_COMPILE_DEFINITIONS)
    if(_defs)
      target_compile_definitions(${t} INTERFACE ${_defs})
    endif()
  endforeach()
  if(TRIB_SANITIZE)
    target_link_options(tributary PUBLIC -fsanitize=address,undefined)
    target_link_options(tributary_static INTERFACE -fsanitize=address,undefined)
  elseif(TRIB_TSAN)
    target_link_options(tributary PUBLIC -fsanitize=thread)
    target_link_options(tributary_static INTERFACE -fsanitize=thread)
  endif()
  install(TARGETS tributary tributary_static EXPORT TributaryTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})

  # The umbrella header: every public header, in layer order.
  string(CONCAT _umbrella "/* Tributary: every public header of the SDK (generated at build time\n"
                " * from the headers each layer installs; see docs/sdk.md). */\n"
                "#ifndef TRIBUTARY_H\n#define TRIBUTARY_H\n\n")
  foreach(h ${_headers})
    string(APPEND _umbrella "#include \"${h}\"\n")
  endforeach()
  string(APPEND _umbrella "\n#endif\n")
  file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/include/tributary.h CONTENT "${_umbrella}")
  install(FILES ${PROJECT_BINARY_DIR}/include/tributary.h DESTINATION ${TRIB_INSTALL_INCLUDEDIR})

  # CMake package.
  install(EXPORT TributaryTargets NAMESPACE Tributary:: FILE TributaryTargets.cmake
    DESTINATION ${TRIB_INSTALL_CMAKEDIR})
  set(TRIB_PKG_CUDA ${TRIB_CUDA})
  set(TRIB_PKG_MSGPACK_MODULE ${MSGPACK_MODULE_NAME})
  if(NOT TRIB_PKG_MSGPACK_MODULE)
    set(TRIB_PKG_MSGPACK_MODULE msgpack-c)
  endif()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/tributary-config.cmake.in
    ${PROJECT_BINARY_DIR}/tributary-config.cmake @ONLY)
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/tributary-config-version.cmake
    VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/tributary-config.cmake
                ${PROJECT_BINARY_DIR}/tributary-config-version.cmake
    DESTINATION ${TRIB_INSTALL_CMAKEDIR})

  # pkg-config: relocatable (the prefix is found from the .pc file's own
  # directory). Default: libtributary.so (it carries its dependencies and an
  # rpath); --static: libtributary.a and every dependency.
  set(_private "")
  foreach(d ${_ext})
    _trib_pc_flags(${d} _f)
    list(APPEND _private ${_f})
  endforeach()
  set(_san "")
  if(TRIB_SANITIZE)
    set(_san " -fsanitize=address,undefined")
  elseif(TRIB_TSAN)
    set(_san " -fsanitize=thread")
  endif()
  list(APPEND _private -lm -l${CMAKE_DL_LIBS})
  list(REMOVE_DUPLICATES _private)
  list(JOIN _private " " _private)
  set(_cflags "-I\${includedir}")
  if(TRIB_CUDA)
    string(APPEND _cflags " -DTRIB_WITH_CUDA")
  endif()
  file(RELATIVE_PATH _up /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
  file(WRITE ${PROJECT_BINARY_DIR}/tributary.pc
    "prefix=\${pcfiledir}/${_up}\n"
    "includedir=\${prefix}/${TRIB_INSTALL_INCLUDEDIR}\n"
    "libdir=\${prefix}/${CMAKE_INSTALL_LIBDIR}\n\n"
    "Name: tributary\n"
    "Description: Tributary: tensors and autograd, torch.distributed.rpc-style RPC, distributed autograd and optimizer, RL envs\n"
    "Version: ${PROJECT_VERSION}\n"
    "Cflags: ${_cflags}\n"
    "Libs: -L\${libdir} -Wl,-rpath,\${libdir} -ltributary -lm${_san}\n"
    "Libs.private: ${_private}\n")
  install(FILES ${PROJECT_BINARY_DIR}/tributary.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endfunction()
