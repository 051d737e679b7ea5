// The canonical text of a config, and the differences between two such texts.
//
// The text is what /resolved_config holds in a results file and what `speclab run --resume`
// compares: two configs that run the same experiment give the same text however they were
// written. It is written from the field tables (config_schema.cpp), so every key appears in it.
#pragma once

#include <string>
#include <vector>

#include "framework/io/experiment_config.h"

namespace speclab {

// Every setting of `config` with its effective value, defaults included, under the canonical
// key names (aliases resolved), as YAML text in a fixed layout (0 vs 0.0, key order, a default
// written out or left implicit make no difference). Doubles are in their shortest exact text;
// paths are absolute and normalised (named models and output.path as written).
std::string effective_config_yaml(const ExperimentConfig& config);

// effective_config_yaml() of a config with every default and one default drafters entry: the
// value each key has where a config does not set it (yaml_differences' `defaults`).
std::string default_config_yaml();

// The settings at which two YAML texts differ, as "key: <a> vs <b>" lines (key paths such as
// sampling.temperature or drafters[1].num_speculative_tokens; "(absent)" for a missing key).
// Keys whose path starts with one of `ignore` (e.g. "output") are skipped. With `defaults` (a
// default_config_yaml() text), a key absent from one text and at its default in the other is no
// difference: a file written before the key existed ran at its default (a drafters[i] key's
// default is drafters[0]'s there).
std::vector<std::string> yaml_differences(const std::string& a, const std::string& b,
                                          const std::vector<std::string>& ignore = {},
                                          const std::string& defaults = "");

// The first `most` of yaml_differences' lines joined with "; ", then "; and N more" for the rest.
std::string differences_list(const std::vector<std::string>& diff, size_t most = 5);

}  // namespace speclab
