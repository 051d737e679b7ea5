// HostServices — the host side of framework/draft/host_api.h: the table of host services that one
// plugin drafter gets, over the DrafterEnv it was built for (the target model, the shared KV
// manager and the target's pool in it).
//
//   HostServices host(env);
//   plugin->create(&options, host.api(), error, error_len);   // the plugin keeps host.api()
//   ...                                                          // until its destroy() returns
//
// Every function of the table catches what SpecLab throws and answers with a return code and a
// message instead (nothing propagates through the plugin's C frames). On the target's KV sequence
// it allows only what layer_skip does: reserve, and forward passes that write past the committed
// length; commit and truncate are the engine's. Sequences the drafter creates with seq_create are
// its own (any operation), and the ones still live are released when the HostServices goes.
#pragma once

#include <map>
#include <set>

#include "framework/core/types.h"
#include "framework/draft/drafter.h"
#include "framework/draft/host_api.h"

namespace speclab {

class HostServices {
 public:
  // env.target and env.kv may be null (the model and KV functions then fail with
  // SPECLAB_E_CONFIG); both must outlive this object.
  explicit HostServices(const DrafterEnv& env);
  ~HostServices();
  HostServices(const HostServices&) = delete;
  HostServices& operator=(const HostServices&) = delete;

  // The table handed to the plugin; valid while this object lives. api()->host is this object.
  const SpeclabHostApi* api() const { return &api_; }

  // For the table's functions (host_services.cpp); `seq` in the target's pool is checked by them.
  const DrafterEnv& env() const { return env_; }
  // The sequences this drafter created with seq_create and has not released, each with the end of
  // the positions its forward calls wrote ([0, written) hold K/V): a forward may not start past
  // it, nor a commit cover positions beyond it.
  std::map<SeqId, int64_t>& own() { return own_; }

 private:
  DrafterEnv env_;
  std::map<SeqId, int64_t> own_;  // sequence -> end of its written positions
  SpeclabHostApi api_{};
};

}  // namespace speclab
