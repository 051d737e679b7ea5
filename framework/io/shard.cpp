#include "framework/io/shard.h"

#include <yaml-cpp/yaml.h>

#include <cstdio>

#include "framework/core/error.h"
#include "framework/core/fnv.h"

namespace speclab {

namespace {

bool parse_count(const std::string& s, int64_t& v) {
  if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  v = std::stoll(s);
  return true;
}

}  // namespace

ShardSpec parse_shard(const std::string& text, const std::string& option) {
  const size_t slash = text.find('/');
  ShardSpec s;
  const bool ok = slash != std::string::npos && parse_count(text.substr(0, slash), s.index) &&
                  parse_count(text.substr(slash + 1), s.count) && s.count >= 1 && s.count <= 100000 &&
                  s.index < s.count;
  if (!ok)
    throw Error(ErrorKind::kConfig,
                "expected i/n with 0 <= i < n <= 100000 (shards are numbered from 0, as SLURM_ARRAY_TASK_ID), "
                "found '" + text + "'",
                "command line", option);
  return s;
}

const std::vector<std::string>& shard_config_ignored_keys() {
  static const std::vector<std::string> keys = {"output", "equivalence", "runtime.target_model",
                                                "runtime.chat_template", "runtime.working_directory"};
  return keys;
}

std::string shard_config_hash(const std::string& resolved_config_yaml) {
  std::string text = resolved_config_yaml;
  try {
    YAML::Node n = YAML::Load(resolved_config_yaml);
    for (const std::string& key : shard_config_ignored_keys()) {
      if (!n.IsMap()) break;
      const size_t dot = key.find('.');
      if (dot == std::string::npos) {
        n.remove(key);
      } else {
        YAML::Node section = n[key.substr(0, dot)];
        if (section && section.IsMap()) section.remove(key.substr(dot + 1));
      }
    }
    YAML::Emitter e;
    e << n;
    text = e.c_str();
  } catch (const YAML::Exception&) {
    // Not YAML: hash the text as it is.
  }
  Fnv64 f;
  f.add(text.data(), text.size());
  return f.hex();
}

}  // namespace speclab
