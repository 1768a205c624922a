# A plugin whose source directory is gone must not load from an earlier build: the build root
# is the apps' plugin search path, and a libit_backend_NAME.so left there by a backends/NAME/
# that was removed (or renamed) would still be found and loaded. Run at every configure
# (CMakeLists.txt includes it; the backends' glob re-runs the configure when a directory
# goes), and as a script by the tests:
#   cmake -DIT_BUILD_DIR=BUILD -DIT_SOURCE_DIR=SRC -P cmake/prune-stale-plugins.cmake
# removes BUILD/libit_backend_NAME.so for every NAME without SRC/backends/NAME/CMakeLists.txt.
file(GLOB it_built_plugins ${IT_BUILD_DIR}/libit_backend_*.so)
foreach(so ${it_built_plugins})
  get_filename_component(f ${so} NAME)
  string(REGEX REPLACE "^libit_backend_(.*)\\.so$" "\\1" it_plugin_name ${f})
  if(NOT EXISTS ${IT_SOURCE_DIR}/backends/${it_plugin_name}/CMakeLists.txt)
    file(REMOVE ${so})
    message(STATUS "removed ${so}: backends/${it_plugin_name}/ is gone")
  endif()
endforeach()
