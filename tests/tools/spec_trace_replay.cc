// Replays a SALVO_SPEC_TRACE=1 trace (stderr of `salvo run`) through a fresh SpecPolicy: the
// trace holds every record the run's policy was given and the caps it was asked with, so the
// policy is deterministic over it and must choose the size the run chose at every pass. That
// makes a real run (an H200 window's) something to study here: -v prints, per pass, the size
// chosen with the budget trees' token estimates and the pass times behind it; a policy changed
// in the source shows at once where it would choose differently.
//
//   spec_trace_replay [-v] TRACE      exit 0: every choice reproduced; 1: some differ; 2: bad input
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "speculative/spec_policy.h"

namespace {

using salvo::DraftSize;
using salvo::PassCosts;
using salvo::PassRecord;
using salvo::SpecPolicy;

struct TracedPass {
  PassRecord record;
  DraftSize caps, size;
};

// One pass line, or false when the line is not one.
bool parse_pass(const std::string& line, TracedPass& out) {
  const char* p = std::strstr(line.c_str(), "spec trace: rows ");
  if (p == nullptr) return false;
  PassRecord& r = out.record;
  char shape[8] = {0}, orders[1024] = {0};
  int depth = 0, drafting = 0;
  double plain = 0;
  // The warm-up mark sits between the pass time and "draft": taken out before the scan.
  std::string text(p);
  const std::string mark = " (warm-up)";
  const size_t at = text.find(mark);
  const bool warmup = at != std::string::npos;
  if (warmup) text = text.substr(0, at) + text.substr(at + mark.size());
  const int n = std::sscanf(text.c_str(),
                            "spec trace: rows %d depth %d %7s pass %lf ms draft %lf ms accepted %d "
                            "tested %d context %d caps %d/%d size %d/%d | plain %lf ms drafting "
                            "%d orders %1023s",
                            &r.rows, &depth, shape, &r.pass_ms, &r.draft_ms, &r.accepted, &r.tested,
                            &r.context, &out.caps.budget, &out.caps.depth, &out.size.budget,
                            &out.size.depth, &plain, &drafting, orders);
  if (n != 15) return false;
  r.tree_depth = depth;
  r.tokens_emitted = r.accepted + 1;
  r.chain = std::strcmp(shape, "chain") == 0;
  r.warmup = warmup;
  r.ordered = std::strcmp(orders, "none") != 0;
  r.path_order.clear();
  if (r.ordered && std::strcmp(orders, "-") != 0) {
    std::istringstream items(orders);
    std::string item;
    while (std::getline(items, item, ',')) r.path_order.push_back(std::stoi(item));
  }
  return true;
}

void print_estimates(const SpecPolicy& policy, DraftSize caps) {
  std::printf(" | plain %.3f ms", policy.plain_ms());
  if (caps.budget <= 0) return;
  const std::vector<double> tokens = policy.budget_tokens(caps.budget);
  std::printf(" | tokens by budget");
  for (int b = 1; b <= caps.budget; ++b) std::printf(" %.2f", tokens[b]);
  std::printf(" | ms by rows");
  for (int rows = 2; rows <= caps.budget + 1; ++rows) std::printf(" %.3f", policy.pass_ms(rows));
}

}  // namespace

int main(int argc, char** argv) {
  bool verbose = false;
  const char* path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-v") == 0) {
      verbose = true;
    } else {
      path = argv[i];
    }
  }
  if (path == nullptr) {
    std::fprintf(stderr, "usage: spec_trace_replay [-v] TRACE\n");
    return 2;
  }
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "spec_trace_replay: cannot read %s\n", path);
    return 2;
  }
  SpecPolicy policy;
  bool started = false;
  int passes = 0, differ = 0, line_no = 0;
  std::string line;
  while (std::getline(in, line)) {
    ++line_no;
    int adaptive = 0, budget_trees = 0;
    char costs[16] = {0};
    const char* policy_line = std::strstr(line.c_str(), "spec trace: policy ");
    if (policy_line != nullptr) {
      if (std::sscanf(policy_line, "spec trace: policy adaptive %d budget-trees %d costs %15s",
                      &adaptive, &budget_trees, costs) != 3) {
        std::fprintf(stderr, "spec_trace_replay: line %d: bad policy line\n", line_no);
        return 2;
      }
      policy = SpecPolicy(adaptive != 0, budget_trees != 0,
                          std::strcmp(costs, "cpu") == 0 ? PassCosts::cpu() : PassCosts());
      started = true;
      continue;
    }
    if (line.find("spec trace: new text") != std::string::npos) {
      policy.new_text();
      continue;
    }
    TracedPass pass;
    if (!parse_pass(line, pass)) {
      if (line.find("spec trace: rows ") != std::string::npos) {
        std::fprintf(stderr, "spec_trace_replay: line %d: bad pass line\n", line_no);
        return 2;
      }
      continue;  // the run's other output
    }
    if (!started) {
      std::fprintf(stderr, "spec_trace_replay: line %d: a pass before the policy line\n", line_no);
      return 2;
    }
    const DraftSize chosen = policy.next(pass.caps.budget, pass.caps.depth);
    const bool same = chosen.budget == pass.size.budget && chosen.depth == pass.size.depth;
    differ += !same;
    if (verbose || (!same && differ <= 10)) {
      std::printf("pass %d: ran %d/%d, replay %d/%d%s", passes, pass.size.budget, pass.size.depth,
                  chosen.budget, chosen.depth, same ? "" : " DIFFERS");
      if (verbose) print_estimates(policy, pass.caps);
      std::printf("\n");
    }
    policy.record(pass.record);
    ++passes;
  }
  std::printf("%d passes, %d chosen as in the run, %d differ\n", passes, passes - differ, differ);
  return differ == 0 ? 0 : 1;
}
