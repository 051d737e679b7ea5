// The real verifier (verify_rejection with its real Rng) run directly on real (p, q) rows of
// stories260K and SmolLM2 (framework/equivalence/verifier_check.h): for k = 1..8, every emitted
// position of multi-step generations (accepted, recovered and bonus tokens, and the steps after
// a rejection) is tested against the exact law of the target, and five faulty verifiers and
// drafters (replacement from p, bonus from row k - 1, always-accept, q reported at temperature
// 1, q drawn from its top-k but reported in full) must be rejected.
//
// No model runs in the loop, so N is large: kN (2·10^6) per cell here, SPECLAB_VERIFIER_N to
// run more by hand (docs/equivalence.md, section 2b, lists the 10^7 runs).
#include "tests/torch_catch.h"

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "framework/core/error.h"
#include "framework/engine/ar_decode.h"
#include "framework/equivalence/analytic_check.h"
#include "framework/equivalence/equivalence_report.h"
#include "framework/equivalence/verifier_check.h"
#include "framework/verify/faulty_acceptance.h"
#include "models/llama/llama_model.h"
#include "models/model_loader.h"
#include "tests/support/stories260k.h"

using namespace speclab;

namespace {

constexpr double kAlpha = 1e-3;         // family-wise level of the lossless cells (Holm)
constexpr double kControlAlpha = 1e-6;  // a control is caught when its Bonferroni p is below this
constexpr int64_t kStoriesN = 1000000;  // draws per lossless cell in `make test` (top_k = 40; half at full vocab)
constexpr int64_t kControlMaxN = 2048000;  // the control power grid: 1000, 2000, ..., this

int64_t draws_per_cell(int64_t fallback) {
  const char* env = std::getenv("SPECLAB_VERIFIER_N");
  return env ? std::stoll(env) : fallback;
}

// Real (target, draft) logit pairs: each prompt, and the prompt plus 4, 8, 12 of its greedy
// tokens; the draft is the target's first `draft_layers` layers (a layer_skip draft).
std::vector<LogitPair> real_pairs(const Model& model, const TokenDecoder& tok, const std::vector<TokenList>& prompts,
                                  int64_t draft_layers) {
  c10::InferenceMode guard;
  std::vector<int64_t> layers;
  for (int64_t l = 0; l < draft_layers; ++l) layers.push_back(l);
  std::vector<LogitPair> out;
  for (const TokenList& ctx : prompts) {
    GenerationOptions gen;
    gen.max_new_tokens = 12;
    gen.ignore_eos = true;
    const TokenList cont = generate_ar(model, tok, ctx, gen, SamplingOptions{}).tokens;
    for (size_t off : {size_t{0}, size_t{4}, size_t{8}, size_t{12}}) {
      TokenList c = ctx;
      c.insert(c.end(), cont.begin(), cont.begin() + static_cast<std::ptrdiff_t>(std::min(off, cont.size())));
      out.push_back({next_token_logits(model, c), next_token_logits(model, c, layers)});
    }
  }
  return out;
}

std::vector<LogitPair>& stories_pairs() {
  static std::vector<LogitPair> pairs = [] {
    at::set_num_threads(1);
    testing::Stories& s = testing::stories();
    std::vector<TokenList> prompts;
    for (const nlohmann::json& r : testing::stories_reference_records())
      prompts.push_back(s.info.tokenizer->encode(r.at("prompt").get<std::string>(), true));
    return real_pairs(*s.model, *s.info.tokenizer, prompts, 4);
  }();
  return pairs;
}

SamplingOptions setting(double t, double top_p, int64_t top_k) {
  SamplingOptions s;
  s.temperature = t;
  s.top_p = top_p;
  s.top_k = top_k;
  return s;
}

struct Cell {
  std::string label;
  VerifierCounts counts;
  VerifierVerdict verdict;
};

// Runs the lossless verifier for k = 1..8 on `pairs` under `s` and checks it: no cell rejects
// after Holm over the 8 cells, every (position, class) of every cell is tested (no vacuous
// cell), bonus and recovered tokens are emitted at recorded positions.
void check_lossless(const std::vector<LogitPair>& pairs, const SamplingOptions& s, int64_t n, const std::string& model) {
  std::vector<Cell> cells;
  int64_t family_tests = 0;
  std::vector<VerifierChain> chains;
  for (int k = 1; k <= 8; ++k) chains.push_back(make_verifier_chain(pairs, s, {s, s}, k + 2, k, 2));
  for (const VerifierChain& c : chains) family_tests += reachable_cells(c);
  for (int k = 1; k <= 8; ++k) {
    const VerifierChain& chain = chains[static_cast<size_t>(k - 1)];
    Cell cell;
    cell.label = model + " " + std::to_string(k);
    cell.counts = run_verifier_chain(chain, k, n, 1000 + static_cast<uint64_t>(k), verify_rejection);
    cell.verdict = test_verifier_chain(chain, cell.counts, kAlpha / static_cast<double>(family_tests));
    cells.push_back(std::move(cell));
  }
  std::vector<double> ps;
  for (const Cell& c : cells) ps.push_back(c.verdict.p_bonferroni);
  const std::vector<double> holm = holm_adjust(ps);
  for (size_t i = 0; i < cells.size(); ++i) {
    const Cell& c = cells[i];
    const VerifierVerdict& v = c.verdict;
    const double acc = static_cast<double>(c.counts.accepted) / static_cast<double>(c.counts.drafted);
    WARN(model << " " << sampling_label(s) << " k=" << c.counts.k << " N=" << n << ": vocab " << chains[i].vocab
               << ", acceptance " << acc << ", recovered " << c.counts.recovered << ", bonus " << c.counts.bonus
               << ", " << v.tested << " (position, class) tests, min p " << v.min_p << " (position "
               << v.worst_position << "), Holm p " << holm[i] << ", max TV " << v.max_tv << ", detectable TV "
               << v.min_radius << ".." << v.max_radius);
    INFO(c.label);
    CHECK(holm[i] >= kAlpha);
    for (const VerifierCellTest& t : v.tests)
      if (t.stats.n_a == 0 || t.stats.dof == 0)
        WARN("vacuous: position " << t.position << ", class " << t.cls << ", " << t.stats.n_a << " draws");
    CHECK(v.vacuous == 0);
    CHECK(v.tested == reachable_cells(chains[i]));
    CHECK(c.counts.bonus > 0);
    CHECK(c.counts.recovered > 0);
  }
}

// The smallest N on the doubling grid 1000, 2000, ... <= n_max at which `control` is caught
// (Bonferroni p < kControlAlpha) at draft length k; -1 when it is not caught at n_max.
int64_t caught_at(const std::vector<LogitPair>& pairs, const SamplingOptions& s, const VerifierControl& control,
                  int k, int64_t n_max, double* p_at_max) {
  const VerifierChain chain = make_verifier_chain(pairs, s, control.draft, k + 2, k, 2);
  int64_t found = -1;
  for (int64_t n = 1000;; n = std::min(2 * n, n_max)) {
    const VerifierCounts counts = run_verifier_chain(chain, k, n, 77, control.rule);
    const VerifierVerdict v = test_verifier_chain(chain, counts, kControlAlpha);
    if (found < 0 && v.p_bonferroni < kControlAlpha) found = n;
    if (n == n_max) {
      *p_at_max = v.p_bonferroni;
      break;
    }
    if (found >= 0) break;
  }
  return found;
}

}  // namespace

TEST_CASE("the real verifier on stories260K rows: every emitted position follows the target's law, k = 1..8",
          "[equivalence][verifier]") {
  const std::vector<LogitPair>& pairs = stories_pairs();
  REQUIRE(pairs.size() == 20);
  const int64_t n = draws_per_cell(kStoriesN);
  check_lossless(pairs, setting(1.0, 1.0, 0), n / 2, "stories260K");  // 512 tokens: twice the cost per draw
  check_lossless(pairs, setting(1.0, 1.0, 40), n, "stories260K");
}

TEST_CASE("verifier check: every negative control is caught on stories260K rows", "[equivalence][verifier]") {
  const std::vector<LogitPair>& pairs = stories_pairs();
  for (const SamplingOptions& s : {setting(0.7, 1.0, 0), setting(0.7, 1.0, 40)}) {
    for (const VerifierControl& c : verifier_controls(s)) {
      if (!c.applicable) {
        WARN(c.name << " at " << sampling_label(s) << ": not applicable (" << c.note << ")");
        continue;
      }
      for (int k : {1, 4}) {
        double p = 1.0;
        const int64_t at = caught_at(pairs, s, c, k, kControlMaxN, &p);
        WARN("stories260K " << sampling_label(s) << " k=" << k << ": " << c.name << " caught at N = " << at);
        INFO(c.name << " k=" << k << " " << sampling_label(s));
        CHECK(at > 0);
      }
    }
  }
}

TEST_CASE("verifier check: shapes, counts and the faulty rules' contracts", "[equivalence][verifier]") {
  // Two-token rows where everything is known: p = (0.75, 0.25), q = (0.25, 0.75) at every
  // (position, class); acceptance probability of x=0 is 1, of x=1 is 1/3.
  LogitPair lp{{std::log(0.75f), std::log(0.25f)}, {std::log(0.25f), std::log(0.75f)}};
  const SamplingOptions s = setting(1.0, 1.0, 0);
  const VerifierChain chain = make_verifier_chain({lp}, s, {s, s}, 3, 2, 1);
  CHECK(chain.vocab == 2);
  CHECK(chain.table_positions == 5);
  const VerifierCounts c = run_verifier_chain(chain, 2, 100000, 5, verify_rejection);
  int64_t total = 0;
  for (int64_t x : c.counts) total += x;
  CHECK(total == 3 * 100000);  // every recorded position of every draw
  // accepted / drafted: Σ min(p, q) = 0.5 per examined token; E[accepted] = 0.5 + 0.25 of 2 drafted
  CHECK(std::fabs(static_cast<double>(c.accepted) / static_cast<double>(c.drafted) - 0.375) < 0.01);
  CHECK(test_verifier_chain(chain, c, 1e-3).p_bonferroni > 1e-3);
  CHECK_THROWS_AS(run_verifier_chain(chain, 3, 10, 1, verify_rejection), Error);
  CHECK_THROWS_AS(run_verifier_chain(chain, 2, 0, 1, verify_rejection), Error);
  CHECK_THROWS_AS(make_verifier_chain({}, s, {s, s}, 3, 2, 1), Error);
  // A reported q that is 0 where the drawn q is not is refused (the verifier would refuse it).
  SamplingOptions top1 = s;
  top1.top_k = 1;
  CHECK_THROWS_AS(make_verifier_chain({lp}, s, {s, top1}, 3, 2, 1), Error);

  // The faulty rules make exactly the lossless rule's draws and differ only where documented.
  const TokenList draft = {1, 1};
  const std::vector<std::vector<float>> p = {{0.75f, 0.25f}, {0.75f, 0.25f}, {0.1f, 0.9f}};
  const std::vector<std::vector<float>> q = {{0.25f, 0.75f}, {0.25f, 0.75f}};
  int differ_recovered = 0, differ_bonus = 0;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    Rng a(seed), b(seed), c2(seed);
    const Verdict real = verify_rejection(draft, p, q, a);
    const Verdict rp = faulty::verify_replacement_from_p(draft, p, q, b);
    const Verdict bp = faulty::verify_bonus_from_previous_row(draft, p, q, c2);
    CHECK(a.state() == b.state());
    CHECK(a.state() == c2.state());
    CHECK(rp.n_accepted == real.n_accepted);
    CHECK(bp.n_accepted == real.n_accepted);
    if (real.bonus) CHECK(rp.next_token == real.next_token);
    if (!real.bonus) CHECK(bp.next_token == real.next_token);
    if (!real.bonus) CHECK(real.next_token == 0);  // the residual max(0, p - q) is one-hot at 0
    differ_recovered += rp.next_token != real.next_token;
    differ_bonus += bp.next_token != real.next_token;
  }
  CHECK(differ_recovered > 100);  // recovered from p gives token 1 a quarter of the time
  CHECK(differ_bonus > 50);       // bonus from (0.75, 0.25) instead of (0.1, 0.9)
}
