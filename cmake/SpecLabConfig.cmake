# find_package(SpecLab) from a SpecLab checkout, for plugins built without a SpecLab build
# (-DSpecLab_DIR=<checkout>/cmake, or HINTS "${SPECLAB_SOURCE_DIR}/cmake"): headers only.
# A SpecLab build directory has its own generated SpecLabConfig.cmake (the SpecLab::plugin_api
# target), which includes the same helper.
include("${CMAKE_CURRENT_LIST_DIR}/SpecLabPlugin.cmake")
