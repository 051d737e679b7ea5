// load_prompts: JSONL files (plain or gzip) and inline prompts (see prompt_loader.h).
#include "framework/io/prompt_loader.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "framework/io/config_util.h"
#include "framework/io/experiment_config.h"

namespace speclab {

namespace {

using config::basename_of;
using config::join;
using config::squote;

constexpr size_t kMaxPromptFileBytes = size_t(1) << 30;

std::string read_prompt_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw Error(ErrorKind::kIo, "cannot open the prompt file: no such file (relative paths are relative to the config file)",
                path, "prompts.files");
  if (!S_ISREG(st.st_mode))
    throw Error(ErrorKind::kIo, "expected a JSONL file, found a directory or device", path, "prompts.files");
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files as they are, and .gz files decompressed
  if (!f) throw Error(ErrorKind::kIo, "cannot open the prompt file", path, "prompts.files");
  std::string out;
  std::vector<char> buf(1 << 16);
  for (;;) {
    const int n = gzread(f, buf.data(), static_cast<unsigned>(buf.size()));
    if (n < 0) {
      int errnum = 0;
      const std::string msg = gzerror(f, &errnum);
      gzclose(f);
      throw Error(ErrorKind::kBadInput, "cannot decompress the prompt file: " + msg, path, "prompts.files");
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > kMaxPromptFileBytes) {
      gzclose(f);
      throw Error(ErrorKind::kBadInput, "expected at most 1 GiB of prompt text, found more", path, "prompts.files");
    }
    out.append(buf.data(), static_cast<size_t>(n));
  }
  const int rc = gzclose(f);
  if (rc != Z_OK) throw Error(ErrorKind::kBadInput, "cannot decompress the prompt file (truncated?)", path, "prompts.files");
  return out;
}

// The value at a dotted path ("turns.0": key "turns", then array index 0), or nullptr.
const nlohmann::json* json_at(const nlohmann::json& j, const std::string& dotted) {
  const nlohmann::json* cur = &j;
  for (const std::string& seg : config::split(dotted, '.')) {
    size_t idx = 0;
    if (cur->is_object()) {
      auto it = cur->find(seg);
      if (it == cur->end()) return nullptr;
      cur = &*it;
    } else if (cur->is_array() && config::is_index(seg, idx) && idx < cur->size()) {
      cur = &(*cur)[idx];
    } else {
      return nullptr;
    }
  }
  return cur;
}

std::string json_kind(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::array: return "an array";
    case nlohmann::json::value_t::string: return "a string";
    case nlohmann::json::value_t::boolean: return "a boolean";
    default: return "a number";
  }
}

std::string json_keys(const nlohmann::json& j) {
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end() && keys.size() < 12; ++it) keys.push_back(it.key());
  return keys.empty() ? "none" : join(keys, ", ");
}

// Why `dotted` names nothing in `j`: the first part that fails and what is there ("found no such
// key" blamed a key that exists where its array index was out of range: turns.5 of two turns).
std::string json_missing(const nlohmann::json& j, const std::string& dotted) {
  const nlohmann::json* cur = &j;
  std::string at;  // the parts walked
  for (const std::string& seg : config::split(dotted, '.')) {
    size_t idx = 0;
    if (cur->is_object()) {
      auto it = cur->find(seg);
      if (it == cur->end())
        return "found no such key (keys " + (at.empty() ? std::string("on this line") : "under " + squote(at)) + ": " +
               json_keys(*cur) + ")";
      cur = &*it;
    } else if (cur->is_array()) {
      if (!config::is_index(seg, idx))
        return "found " + squote(at) + " an array of " + std::to_string(cur->size()) + ", which takes an index, not " +
               squote(seg);
      if (idx >= cur->size())
        return "found " + squote(at) + " an array of " + std::to_string(cur->size()) + ", without an index " + seg;
      cur = &(*cur)[idx];
    } else {
      return "found " + squote(at) + " " + json_kind(*cur) + ", which holds no " + squote(seg);
    }
    at += (at.empty() ? "" : ".") + seg;
  }
  return "found no such key";
}

// A prompt field: the text must be a string; ids and categories may also be numbers.
std::string json_field(const nlohmann::json& j, const std::string& field, const std::string& setting, bool allow_number,
                       const std::string& where) {
  const nlohmann::json* v = json_at(j, field);
  if (!v)
    throw Error(ErrorKind::kBadInput,
                "expected a " + std::string(allow_number ? "string or number" : "string") + " at key " + squote(field) +
                    " (prompts." + setting + "), " + json_missing(j, field),
                where, field);
  if (v->is_string()) {
    std::string out = v->get<std::string>();
    // HDF5 stores strings up to their first NUL: the text recorded would differ from the text run,
    // and --resume would then find another prompt set and refuse to continue the file.
    if (out.find('\0') != std::string::npos)
      throw Error(ErrorKind::kBadInput,
                  "expected text without NUL characters (\\u0000) at key " + squote(field) + " (prompts." + setting +
                      "): the results file keeps strings up to their first NUL",
                  where, field);
    return out;
  }
  if (allow_number && v->is_number()) return v->dump();
  throw Error(ErrorKind::kBadInput,
              "expected a " + std::string(allow_number ? "string or number" : "string") + " at key " + squote(field) +
                  " (prompts." + setting + "), found " + json_kind(*v),
              where, field);
}

// The prompts of one JSONL file, read with `src`'s keys (a PromptSource, or the section's own
// keys for prompts.files).
// `seen`, when given, collects the category of every line (kept or not).
void read_jsonl(const std::string& base, const PromptSource& src, std::vector<Prompt>& out,
                std::vector<std::pair<std::string, std::string>>& where_out, std::set<std::string>* seen = nullptr) {
  const std::string path = config::resolve_path(base, src.file);
  const std::string text = read_prompt_file(path);
  std::map<std::string, int64_t> kept;  // per category
  size_t line_no = 0, start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (line_no == 1 && config::starts_with(line, "\xEF\xBB\xBF")) line.erase(0, 3);  // UTF-8 BOM
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      std::string msg = e.what();
      const size_t close = msg.find("] ");
      if (close != std::string::npos) msg = msg.substr(close + 2);
      throw Error(ErrorKind::kBadInput, "expected one JSON object per line, found invalid JSON (" + msg + ")", where);
    }
    if (!j.is_object())
      throw Error(ErrorKind::kBadInput, "expected one JSON object per line, found " + json_kind(j), where);
    Prompt p;
    const nlohmann::json* value = json_at(j, src.field);
    if (value && value->is_array()) {
      // A conversation: each element one user turn (MT-bench's "turns").
      if (value->empty())
        throw Error(ErrorKind::kBadInput,
                    "expected a string or a list of user turns (strings) at key " + squote(src.field) +
                        " (prompts.field), found an empty array",
                    where, src.field);
      for (size_t t = 0; t < value->size(); ++t) {
        const std::string key = src.field + "." + std::to_string(t);
        std::string turn = json_field(j, key, "field", false, where);
        if (turn.empty())
          throw Error(ErrorKind::kBadInput,
                      "expected non-empty prompt text at key " + squote(key) + " (prompts.field), found an empty string",
                      where, src.field);
        p.turns.push_back(std::move(turn));
      }
      if (p.turns.size() == 1) {
        p.text = std::move(p.turns.front());
        p.turns.clear();
      } else {
        p.text = conversation_text(p.turns);
      }
    } else {
      p.text = json_field(j, src.field, "field", false, where);
    }
    if (p.text.empty())
      throw Error(ErrorKind::kBadInput,
                  "expected non-empty prompt text at key " + squote(src.field) + " (prompts.field), found an empty string",
                  where, src.field);
    p.id = src.id_field.empty() ? basename_of(src.file) + ":" + std::to_string(line_no)
                                : json_field(j, src.id_field, "id_field", true, where);
    p.category = src.category_field.empty() ? src.category : json_field(j, src.category_field, "category_field", true, where);
    if (seen) seen->insert(p.category);
    if (!src.categories.empty() && std::find(src.categories.begin(), src.categories.end(), p.category) == src.categories.end())
      continue;
    if (src.per_category > 0 && kept[p.category]++ >= src.per_category) continue;
    out.push_back(std::move(p));
    where_out.emplace_back(where, src.id_field.empty() ? "id" : src.id_field);
  }
}

}  // namespace

std::string conversation_text(const std::vector<std::string>& turns) {
  // An answer cut inside a UTF-8 character (max_new_tokens) holds a partial sequence: written as
  // U+FFFD, as /runs/text writes one (dump() would throw on it).
  return nlohmann::json(turns).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<Prompt> load_prompts(const ExperimentConfig& config) {
  const PromptsOptions& po = config.prompts;
  const std::string base = config.source_path.empty() ? std::string(".") : config::dirname_of(config.source_path);
  std::vector<Prompt> out;
  std::vector<std::pair<std::string, std::string>> where;  // per prompt: (file:line or config, field)
  for (const std::string& file : po.files) {
    PromptSource src;
    src.file = file;
    src.field = po.field;
    src.category_field = po.category_field;
    src.id_field = po.id_field;
    read_jsonl(base, src, out, where);
  }
  for (size_t i = 0; i < po.sources.size(); ++i) {
    const PromptSource& src = po.sources[i];
    std::set<std::string> seen;
    read_jsonl(base, src, out, where, &seen);
    // A listed category that no line has (a misspelt "reasonin") dropped that category's prompts
    // without a word (until 2026-12-06).
    for (const std::string& c : src.categories) {
      if (seen.count(c)) continue;
      std::string found;
      for (const std::string& s : seen) found += (found.empty() ? "" : ", ") + squote(s);
      throw Error(ErrorKind::kConfig,
                  "expected categories that occur in " + src.file + ", found " + squote(c) +
                      ", which no line has (its categories: " + (found.empty() ? "none" : found) + ")",
                  config.source_path, "prompts.sources[" + std::to_string(i) + "].categories");
    }
  }
  for (size_t i = 0; i < po.inline_prompts.size(); ++i) {
    const InlinePrompt& ip = po.inline_prompts[i];
    Prompt p;
    p.text = ip.text;
    p.category = ip.category;
    p.id = ip.id.empty() ? "inline:" + std::to_string(i + 1) : ip.id;
    out.push_back(std::move(p));
    where.emplace_back(config.source_path, "prompts.inline[" + std::to_string(i) + "].id");
  }
  if (po.limit > 0 && out.size() > static_cast<size_t>(po.limit)) out.resize(static_cast<size_t>(po.limit));
  // An id names one prompt: /runs refers to prompts by id, so two different prompts under one id
  // (two files of the same name, or an id_field that repeats) would be mixed up in every analysis.
  // The same prompt listed twice is allowed.
  std::map<std::string, size_t> first;
  for (size_t i = 0; i < out.size(); ++i) {
    const auto [it, fresh] = first.emplace(out[i].id, i);
    if (fresh) continue;
    const Prompt& a = out[it->second];
    if (a.text == out[i].text && a.category == out[i].category) continue;
    throw Error(ErrorKind::kBadInput,
                "expected each prompt id to name one prompt, found id " + squote(out[i].id) + " for two different " +
                    (a.text == out[i].text ? "categories" : "texts") + " (the first at " + where[it->second].first +
                    (where[it->second].first == config.source_path ? " " + where[it->second].second : std::string()) +
                    ")" +
                    (where[i].first == config.source_path ? "; give each inline prompt its own id"
                                                          : "; give the files distinct names or set prompts.id_field to a unique key"),
                where[i].first, where[i].second);
  }
  if (out.empty()) {
    std::vector<std::string> names = po.files;
    for (const PromptSource& src : po.sources) names.push_back(src.file);
    throw Error(ErrorKind::kBadInput, "expected at least one prompt, found none in " + join(names, ", "),
                config.source_path, "prompts");
  }
  return out;
}

}  // namespace speclab
