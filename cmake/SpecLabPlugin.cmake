# speclab_add_drafter_plugin(<name> <sources...>): a SpecLab drafter plugin, <name>.so, built the
# way the host needs it (docs/plugins.md). Reached through find_package(SpecLab): a SpecLab build
# directory's generated SpecLabConfig.cmake, or the checkout's cmake/SpecLabConfig.cmake.
#
#  - C++17 and the host's libstdc++ std::string layout (SPECLAB_PLUGIN_CXX11_ABI, which a build
#    directory's SpecLabConfig.cmake sets from libtorch's flags; 1, the C++11 layout, from a
#    checkout): the plugin shares C++ objects (Drafter, std::string, std::vector) with the host, so
#    it must use the host's standard library ABI and, in practice, the same compiler.
#  - Only the entry point speclab_drafter_plugin is exported (exports.map keeps the standard
#    library's template instances local too), so nothing clashes with the host or with other
#    plugins and the library can be unloaded once its last drafter is gone.
#  - -Wl,--no-undefined: a call to a non-inline SpecLab function (the host exports none; use the
#    host services table, framework/draft/host_api.h) fails here, at link time, instead of at dlopen.
if(NOT DEFINED SPECLAB_PLUGIN_CXX11_ABI)
  set(SPECLAB_PLUGIN_CXX11_ABI 1)
endif()
set(SPECLAB_PLUGIN_EXPORTS "${CMAKE_CURRENT_LIST_DIR}/speclab_plugin_exports.map")
get_filename_component(SPECLAB_PLUGIN_INCLUDE_DIR "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "" FORCE)
endif()

function(speclab_add_drafter_plugin name)
  add_library(${name} MODULE ${ARGN})
  if(TARGET SpecLab::plugin_api)
    target_link_libraries(${name} PRIVATE SpecLab::plugin_api)
  else()
    target_include_directories(${name} PRIVATE "${SPECLAB_PLUGIN_INCLUDE_DIR}")
  endif()
  set_target_properties(${name} PROPERTIES
    CXX_STANDARD 17
    CXX_STANDARD_REQUIRED ON
    CXX_EXTENSIONS OFF
    PREFIX ""
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LINK_DEPENDS "${SPECLAB_PLUGIN_EXPORTS}")
  target_compile_definitions(${name} PRIVATE _GLIBCXX_USE_CXX11_ABI=${SPECLAB_PLUGIN_CXX11_ABI})
  target_compile_options(${name} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  target_link_options(${name} PRIVATE -Wl,--no-undefined "-Wl,--version-script=${SPECLAB_PLUGIN_EXPORTS}")
endfunction()
