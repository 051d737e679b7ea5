# The YAML config loader's sources (torch-free: yaml-cpp, nlohmann-json, zlib), for the builds
# that compile them directly instead of linking speclab_runtime: the fuzz harnesses
# (tests/fuzz/CMakeLists.txt) and the speclab_config library (CMakeLists.txt).
get_filename_component(_speclab_root ${CMAKE_CURRENT_LIST_DIR}/../.. ABSOLUTE)
set(SPECLAB_CONFIG_SOURCES)
foreach(name experiment_config config_fields config_schema config_parse config_overrides config_canonical sweep
             prompt_loader yaml_util)
  list(APPEND SPECLAB_CONFIG_SOURCES ${_speclab_root}/framework/io/${name}.cpp)
endforeach()
