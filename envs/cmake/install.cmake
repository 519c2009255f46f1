# Install rules for envs (included from envs/CMakeLists.txt). Layout:
#   <prefix>/include/tributary/envs/{env,vec_env,plugin}.h  (include root:
#       <prefix>/include/tributary, so code says #include "envs/env.h")
#   <prefix>/lib/libtrib_envs.a, <prefix>/bin/trib-env
#   <prefix>/lib/pkgconfig/tributary.pc
#   <prefix>/lib/cmake/tributary/tributaryConfig.cmake -> tributary::trib_envs
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TRIB_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/tributary)
set(TRIB_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/tributary)

install(FILES env.h vec_env.h plugin.h DESTINATION ${TRIB_INSTALL_INCLUDEDIR}/envs)
install(TARGETS trib_envs trib-env EXPORT tributaryTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT tributaryTargets NAMESPACE tributary:: FILE tributaryTargets.cmake
  DESTINATION ${TRIB_INSTALL_CMAKEDIR})

file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/tributaryConfig.cmake
  "# Tributary CMake package: imported targets tributary::trib_envs and\n"
  "# tributary::trib-env. Headers: #include \"envs/env.h\".\n"
  "include(\"\${CMAKE_CURRENT_LIST_DIR}/tributaryTargets.cmake\")\n")
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/tributaryConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tributaryConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/tributaryConfigVersion.cmake
  DESTINATION ${TRIB_INSTALL_CMAKEDIR})

# pkg-config: relocatable (prefix found from the .pc file's own directory), so
# `cmake --install build --prefix P` gives a working P/lib/pkgconfig/tributary.pc.
file(RELATIVE_PATH _trib_pc_up /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
set(_trib_pc_libs "-L\${libdir} -ltrib_envs -lm ${CMAKE_DL_LIBS}")
if(CMAKE_DL_LIBS)
  set(_trib_pc_libs "-L\${libdir} -ltrib_envs -lm -l${CMAKE_DL_LIBS}")
endif()
if(TRIB_SANITIZE)
  string(APPEND _trib_pc_libs " -fsanitize=address,undefined")
elseif(TRIB_TSAN)
  string(APPEND _trib_pc_libs " -fsanitize=thread")
endif()
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/tributary.pc
  "prefix=\${pcfiledir}/${_trib_pc_up}\n"
  "includedir=\${prefix}/${TRIB_INSTALL_INCLUDEDIR}\n"
  "libdir=\${prefix}/${CMAKE_INSTALL_LIBDIR}\n\n"
  "Name: tributary\n"
  "Description: Tributary RL system: environment API, built-in envs, vec_env, plug-in loader\n"
  "Version: ${PROJECT_VERSION}\n"
  "Cflags: -I\${includedir}\n"
  "Libs: ${_trib_pc_libs}\n")
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tributary.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
