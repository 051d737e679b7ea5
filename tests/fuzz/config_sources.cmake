# The YAML config loader's sources (torch-free: yaml-cpp, nlohmann-json, zlib) and the options
# structs' validate() it calls, in one list for the two builds that compile them: the
# speclab_config library (CMakeLists.txt) and the standalone fuzz project (tests/fuzz/CMakeLists.txt).
get_filename_component(_speclab_root ${CMAKE_CURRENT_LIST_DIR}/../.. ABSOLUTE)
set(SPECLAB_CONFIG_SOURCES)
foreach(name experiment_config config_fields config_schema config_parse config_overrides config_canonical sweep
             prompt_loader yaml_util)
  list(APPEND SPECLAB_CONFIG_SOURCES ${_speclab_root}/framework/io/${name}.cpp)
endforeach()
# The options structs outside speclab_math (the fuzz project adds speclab_math's own).
list(APPEND SPECLAB_CONFIG_SOURCES ${_speclab_root}/framework/draft/drafter_options.cpp
     ${_speclab_root}/framework/engine/generation.cpp)
