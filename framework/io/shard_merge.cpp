#include "framework/io/shard_merge.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>
#include <tuple>

#include <yaml-cpp/yaml.h>

#include "framework/core/error.h"
#include "framework/core/replace_file.h"
#include "framework/io/config_canonical.h"
#include "framework/io/config_fields.h"
#include "framework/io/hdf5_journal.h"
#include "framework/io/hdf5_recorder.h"
#include "framework/io/shard.h"

namespace speclab {

namespace {

using GroupKey = std::tuple<int64_t, int64_t, int64_t>;  // (point, prompt, repeat)

std::string run_text(const RunKey& k, const std::vector<PromptRecord>& prompts) {
  const std::string id = k.prompt >= 0 && k.prompt < static_cast<int64_t>(prompts.size())
                             ? prompts[static_cast<size_t>(k.prompt)].id
                             : "#" + std::to_string(k.prompt);
  return "(point " + std::to_string(k.point) + ", prompt '" + id + "', repeat " + std::to_string(k.repeat) +
         ", method '" + k.method + "')";
}

std::string shard_text(const ExperimentData& d) { return ShardSpec{d.meta.shard_index, d.meta.shard_count}.text(); }

// The first difference between two shards' descriptions of the experiment ("" when none).
std::string description_difference(const ExperimentData& a, const ExperimentData& b) {
  if (a.points.size() != b.points.size())
    return std::to_string(a.points.size()) + " vs " + std::to_string(b.points.size()) + " sweep points";
  if (a.prompts.size() != b.prompts.size())
    return std::to_string(a.prompts.size()) + " vs " + std::to_string(b.prompts.size()) + " prompts";
  if (a.methods != b.methods) return "methods";
  for (size_t i = 0; i < a.points.size(); ++i)
    if (a.points[i].values != b.points[i].values) return "sweep point #" + std::to_string(i);
  for (size_t i = 0; i < a.prompts.size(); ++i) {
    const PromptRecord &p = a.prompts[i], &q = b.prompts[i];
    if (p.id != q.id) return "prompt #" + std::to_string(i) + ": id '" + p.id + "' vs '" + q.id + "'";
    if (p.text != q.text) return "prompt '" + p.id + "': text";
    // As --resume compares them: a prompt file edited between shards (its contents are not in
    // config_hash) merged into a file whose /prompts and /runs disagreed on the category.
    if (p.category != q.category)
      return "prompt '" + p.id + "': category '" + p.category + "' vs '" + q.category + "'";
  }
  if (a.meta.plan != b.meta.plan) return "plans";
  return "";
}

// Every file is a finished shard of the same experiment as the first.
void check_same_experiment(const std::vector<std::string>& paths, const std::vector<ExperimentData>& shards) {
  for (size_t i = 0; i < shards.size(); ++i) {
    const ExperimentData& d = shards[i];
    if (d.meta.plan.empty())
      throw Error(ErrorKind::kBadInput,
                  "expected a file written by `speclab run` with a plan (/plan), found none (written before sharding "
                  "existed?)",
                  paths[i]);
    if (d.status != "complete")
      throw Error(ErrorKind::kBadInput,
                  "expected a finished shard (status complete), found status '" + d.status + "' in shard " +
                      shard_text(d) + "; finish it with `speclab run ... --shard " + shard_text(d) + " --resume`",
                  paths[i]);
  }
  const ExperimentData& a = shards.front();
  for (size_t i = 1; i < shards.size(); ++i) {
    const ExperimentData& b = shards[i];
    if (b.meta.config_hash != a.meta.config_hash) {
      const std::vector<std::string> diff =
          yaml_differences(a.resolved_config_yaml, b.resolved_config_yaml, shard_config_ignored_keys());
      throw Error(ErrorKind::kBadInput,
                  "shards " + paths[0] + " and " + paths[i] + " come from different configs (config_hash " +
                      a.meta.config_hash + " vs " + b.meta.config_hash +
                      (diff.empty() ? "" : "; " + diff.front() +
                                               (diff.size() > 1 ? " and " + std::to_string(diff.size() - 1) + " more"
                                                                : "")) +
                      ")",
                  paths[i], "config_hash");
    }
    if (b.meta.git_revision != a.meta.git_revision)
      throw Error(ErrorKind::kBadInput,
                  "shards " + paths[0] + " and " + paths[i] + " come from different revisions (" +
                      a.meta.git_revision + " vs " + b.meta.git_revision + ")",
                  paths[i], "git_revision");
    if (b.meta.shard_count != a.meta.shard_count)
      throw Error(ErrorKind::kBadInput,
                  "shards " + paths[0] + " (" + shard_text(a) + ") and " + paths[i] + " (" + shard_text(b) +
                      ") split the experiment into different numbers of shards",
                  paths[i], "shard_count");
    const std::string difference = description_difference(a, b);
    if (!difference.empty())
      throw Error(ErrorKind::kBadInput,
                  "shards " + paths[0] + " and " + paths[i] + " describe different experiments (" + difference + ")",
                  paths[i], "plan");
  }
}

// Each shard 0..n-1 given exactly once.
void check_shard_set(const std::vector<std::string>& paths, const std::vector<ExperimentData>& shards) {
  const int64_t n = shards.front().meta.shard_count;
  std::vector<int64_t> file_of(static_cast<size_t>(std::max<int64_t>(n, 0)), -1);
  for (size_t i = 0; i < shards.size(); ++i) {
    const int64_t s = shards[i].meta.shard_index;
    if (s < 0 || s >= n)
      throw Error(ErrorKind::kBadInput, "expected a shard index below " + std::to_string(n) + ", found " +
                                            std::to_string(s), paths[i], "shard_index");
    int64_t& f = file_of[static_cast<size_t>(s)];
    if (f >= 0)
      throw Error(ErrorKind::kBadInput,
                  "shard " + shard_text(shards[i]) + " given twice: " + paths[static_cast<size_t>(f)] + " and " +
                      paths[i],
                  paths[i], "shard_index");
    f = static_cast<int64_t>(i);
  }
  std::string missing, given;
  int64_t n_missing = 0;
  for (int64_t s = 0; s < n; ++s)
    if (file_of[static_cast<size_t>(s)] < 0) {
      missing += (n_missing++ ? ", " : "") + ShardSpec{s, n}.text();
    }
  if (n_missing == 0) return;
  for (size_t i = 0; i < shards.size(); ++i) given += (i ? ", " : "") + paths[i] + " = " + shard_text(shards[i]);
  throw Error(ErrorKind::kBadInput,
              "expected all " + std::to_string(n) + " shards, missing " + std::to_string(n_missing) + ": " + missing +
                  " (given: " + given + ")",
              "command line", "SHARD");
}

}  // namespace

ExperimentData merge_shards(const std::vector<std::string>& paths, const std::string& output_path) {
  if (paths.empty()) throw Error(ErrorKind::kBadInput, "expected at least one shard file, found none", "command line", "SHARD");
  std::vector<ExperimentData> shards;
  for (const std::string& p : paths) shards.push_back(read_experiment(p));
  check_same_experiment(paths, shards);
  check_shard_set(paths, shards);

  const ExperimentData& a = shards.front();
  const int64_t n = a.meta.shard_count;
  std::map<GroupKey, int64_t> row_of;
  for (size_t r = 0; r < a.meta.plan.size(); ++r) {
    const PlanGroup& g = a.meta.plan[r];
    row_of[{g.point, g.prompt, g.repeat}] = static_cast<int64_t>(r);
  }
  std::map<std::string, size_t> method_index;
  for (size_t m = 0; m < a.methods.size(); ++m) method_index[a.methods[m]] = m;

  // slot (plan row, method) -> the run, from whichever shard holds it.
  std::vector<const RunRecord*> slot(a.meta.plan.size() * a.methods.size(), nullptr);
  std::vector<size_t> slot_file(slot.size(), 0);
  for (size_t i = 0; i < shards.size(); ++i) {
    const ShardSpec spec{shards[i].meta.shard_index, n};
    for (const RunRecord& run : shards[i].runs) {
      const auto row = row_of.find({run.key.point, run.key.prompt, run.key.repeat});
      const auto m = method_index.find(run.key.method);
      if (row == row_of.end() || m == method_index.end())
        throw Error(ErrorKind::kBadInput, "prompt-run " + run_text(run.key, a.prompts) + " is not in the plan",
                    paths[i], "runs row " + std::to_string(run.run_id));
      if (!spec.owns(row->second))
        throw Error(ErrorKind::kBadInput,
                    "prompt-run " + run_text(run.key, a.prompts) + " belongs to shard " +
                        ShardSpec{row->second % n, n}.text() + ", found in shard " + spec.text(),
                    paths[i], "runs row " + std::to_string(run.run_id));
      const size_t s = static_cast<size_t>(row->second) * a.methods.size() + m->second;
      if (slot[s])
        throw Error(ErrorKind::kBadInput, "prompt-run " + run_text(run.key, a.prompts) + " recorded twice",
                    paths[i], "runs row " + std::to_string(run.run_id));
      slot[s] = &run;
      slot_file[s] = i;
    }
  }
  int64_t n_missing = 0;
  std::string first_missing;
  for (size_t s = 0; s < slot.size(); ++s) {
    if (slot[s]) continue;
    if (n_missing++) continue;
    const PlanGroup& g = a.meta.plan[s / a.methods.size()];
    const int64_t owner = static_cast<int64_t>(s / a.methods.size()) % n;
    size_t file = 0;
    while (shards[file].meta.shard_index != owner) ++file;
    first_missing = run_text({g.point, g.prompt, a.methods[s % a.methods.size()], g.repeat}, a.prompts) +
                    " of shard " + ShardSpec{owner, n}.text() + " (" + paths[file] + ")";
  }
  if (n_missing)
    throw Error(ErrorKind::kBadInput,
                "expected every prompt-run of the plan, missing " + std::to_string(n_missing) + ": " + first_missing +
                    (n_missing > 1 ? " and " + std::to_string(n_missing - 1) + " more" : ""),
                "command line", "SHARD");

  ExperimentData out;
  // Both stored configs name the merged file as their output.path, as a run records its own
  // (`--output` included): /config_yaml named shard 0's file until 2026-12-06.
  const auto with_output = [&](const std::string& yaml, const char* field) {
    if (output_path.empty() || yaml.empty()) return yaml;
    try {
      return config::with_output_path(yaml, output_path);  // as given, as a run records its own
    } catch (const YAML::Exception& e) {
      throw Error(ErrorKind::kBadInput, "expected the settings as YAML, found malformed YAML: " + e.msg, paths.front(),
                  field);
    } catch (const std::invalid_argument&) {
      throw Error(ErrorKind::kBadInput, "expected the settings as a YAML map, found another kind of YAML",
                  paths.front(), field);
    }
  };
  out.config_yaml = with_output(a.config_yaml, "config_yaml");
  out.resolved_config_yaml = with_output(a.resolved_config_yaml, "resolved_config");
  out.points = a.points;
  out.prompts = a.prompts;
  out.methods = a.methods;
  out.meta = a.meta;
  out.meta.resolved_config_yaml = out.resolved_config_yaml;
  out.meta.config_yaml = out.config_yaml;
  out.meta.shard_index = 0;
  out.meta.shard_count = 1;
  out.meta.merged_shards = n;
  for (const ExperimentData& d : shards)
    if (!d.meta.start_time.empty() && d.meta.start_time < out.meta.start_time) out.meta.start_time = d.meta.start_time;
  out.runs.reserve(slot.size());
  for (const RunRecord* r : slot) {
    out.runs.push_back(*r);
    out.runs.back().run_id = static_cast<int64_t>(out.runs.size() - 1);
  }
  out.status = "complete";
  return out;
}

void write_experiment_file(const std::string& given, const ExperimentData& data, const ExperimentSummary& summary,
                           const std::string& end_time) {
  const std::string path = replace_target(given);  // through a link: the file it leads to
  const std::string tmp = path + ".merging";
  auto cleanup = [&] {
    ::unlink(tmp.c_str());
    ::unlink((tmp + ".partial").c_str());
    ::unlink((tmp + ".journal").c_str());
  };
  cleanup();
  try {
    Hdf5Recorder rec = Hdf5Recorder::create(tmp, data.meta, data.points, data.prompts, data.methods);
    std::vector<RunRecord> runs = data.runs;
    rec.append_all(runs);
    rec.write_summary(summary);
    rec.set_root_attribute("end_time", end_time);
    rec.set_root_attribute("status", "complete");
  } catch (const Error& e) {
    cleanup();
    if (e.kind() != ErrorKind::kIo) throw;
    // The recorder's words are a run's: they named the temporary and advised --resume, which
    // merge has not (until 2026-12-07). Its cause, with "cannot write OUT.merging:" said of OUT
    // (other names, such as OUT.merging.partial, left as they are).
    std::string cause = e.message();
    for (const char* advice : {"; the file keeps", "; no prompt-run was recorded"})
      if (const size_t at = cause.find(advice); at != std::string::npos) cause.erase(at);
    for (size_t at = cause.find(tmp + ":"); at != std::string::npos; at = cause.find(tmp + ":", at + path.size()))
      cause.replace(at, tmp.size(), path);
    throw Error(ErrorKind::kIo, "cannot write the merged file: " + cause + " (nothing was written; merge again once "
                                "the cause is fixed)", path, "output.path");
  } catch (...) {
    cleanup();
    throw;
  }
  // A journal a killed writer left belongs to the file being replaced: the next reader would
  // apply it to the merged file and wreck it (found by a probe on 2026-12-06), as run --overwrite
  // already knew (Hdf5Recorder::create).
  if (::unlink(hdf5_journal_path(path).c_str()) != 0 && errno != ENOENT) {
    const int err = errno;
    cleanup();
    throw Error(ErrorKind::kIo, "cannot remove " + hdf5_journal_path(path) + ", an earlier writer's: " + std::strerror(err), path);
  }
  try {
    keep_mode_and_owner(path, tmp);  // a merged file written over an earlier one keeps its mode
  } catch (...) {
    cleanup();
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    cleanup();
    throw Error(ErrorKind::kIo, "cannot rename " + tmp + " to the output file: " + std::strerror(err), path);
  }
}

}  // namespace speclab
