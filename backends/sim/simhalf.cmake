# simhalf: the same backend with half its kernel slots left empty (a test of the core's CPU
# fallback and coverage report; see kernels.c). Not for users: neither installed nor copied
# by scripts/new-backend.sh, and built beside the test plugins (BUILD/test-plugins, which the
# tests put on IT_BACKEND_PATH), off the apps' search path.
if(TARGET infinitrain) # the tree's own build only
  add_library(it_backend_simhalf MODULE runtime.c memory.c kernels.c backend.c)
  target_compile_definitions(it_backend_simhalf PRIVATE IT_SIM_HALF)
  target_link_libraries(it_backend_simhalf PRIVATE infinitrain::infinitrain Threads::Threads)
  target_include_directories(it_backend_simhalf PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  set_target_properties(it_backend_simhalf PROPERTIES PREFIX "lib"
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/test-plugins)
endif()
