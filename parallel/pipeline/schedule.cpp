// Builds the 1F1B and GPipe action lists of one stage and measures them: the activation memory
// they hold (max_in_flight) and the bubble of their ideal timeline (ideal_idle_fraction).
#include "parallel/pipeline/schedule.h"

#include <algorithm>

#include "core/error.h"

namespace feast {
namespace {

void check_shape(int stages, int micro_batches) {
  if (stages < 1)
    throw ConfigError("parallel.pp = " + std::to_string(stages) + " must be at least 1");
  if (micro_batches < 1)
    throw ConfigError("parallel.num_micro_batches = " + std::to_string(micro_batches) +
                      " must be at least 1");
}

// Appends one compute action with the transfers around it: receive just before, send just after.
// The executor's sends are non-blocking and its receives blocking; posting each send as soon as
// its data exists means a stage never blocks while holding data its neighbour waits for, and
// lets the neighbour start as early as the ideal timeline assumes.
struct Builder {
  int stages, stage;
  std::vector<Action> actions;

  // send_with_next: the send goes out together with the receive that follows it.
  void forward(int k, bool send_with_next = false) {
    if (stage > 0) actions.push_back({ActionType::kRecvActivation, k});
    actions.push_back({ActionType::kForward, k});
    if (stage < stages - 1) actions.push_back({ActionType::kSendActivation, k, send_with_next});
  }
  void backward(int k, bool send_with_next = false) {
    if (stage < stages - 1) actions.push_back({ActionType::kRecvGrad, k});
    actions.push_back({ActionType::kBackward, k});
    if (stage > 0) actions.push_back({ActionType::kSendGrad, k, send_with_next});
  }
};

}  // namespace

ScheduleKind parse_schedule_kind(const std::string& name) {
  if (name == "1f1b") return ScheduleKind::kOneFOneB;
  if (name == "gpipe") return ScheduleKind::kGPipe;
  throw ConfigError("parallel.schedule = \"" + name + "\": expected \"1f1b\" or \"gpipe\"");
}

std::string to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kOneFOneB: return "1f1b";
    case ScheduleKind::kGPipe: return "gpipe";
  }
  return "?";
}

std::vector<Action> build_schedule(ScheduleKind kind, int stages, int stage, int micro_batches) {
  check_shape(stages, micro_batches);
  FEAST_CHECK(stage >= 0 && stage < stages,
              "stage " << stage << " outside " << stages << " stages");
  const int m = micro_batches;
  Builder b{stages, stage, {}};
  if (kind == ScheduleKind::kGPipe) {
    for (int k = 0; k < m; ++k) b.forward(k);
    for (int k = 0; k < m; ++k) b.backward(k);
    return b.actions;
  }
  // 1F1B: stage s must run p - s - 1 forwards ahead before the first gradient can come back
  // from the last stage; after that each backward frees the slot the next forward takes, so no
  // stage ever holds more than p - s micro-batches.
  const int warmup = std::min(stages - stage - 1, m);
  for (int k = 0; k < warmup; ++k) b.forward(k);
  // In the steady state each send is paired with the receive after it (Action::with_next): the
  // activation with the gradient to come back, and the gradient with the next activation
  // (unless this was the last steady forward). Stage s + 1, whose warm-up is one shorter, pairs
  // the same transfers: its gradient i with activation warmup + i (Megatron-LM's
  // send_forward_recv_backward and send_backward_recv_forward).
  for (int i = 0; i < m - warmup; ++i) {
    b.forward(warmup + i, /*send_with_next=*/true);
    b.backward(i, /*send_with_next=*/i + 1 < m - warmup);
  }
  for (int k = m - warmup; k < m; ++k) b.backward(k);
  return b.actions;
}

int max_in_flight(const std::vector<Action>& actions) {
  int held = 0, most = 0;
  for (const Action& a : actions) {
    if (a.type == ActionType::kForward) most = std::max(most, ++held);
    if (a.type == ActionType::kBackward) --held;
  }
  return most;
}

double ideal_idle_fraction(ScheduleKind kind, int stages, int micro_batches) {
  check_shape(stages, micro_batches);
  const int p = stages, m = micro_batches;
  std::vector<std::vector<Action>> lists;
  for (int s = 0; s < p; ++s) lists.push_back(build_schedule(kind, p, s, m));
  // act_ready[s][k]: when stage s posted micro-batch k's activation for s + 1; grad_ready[s][k]:
  // when stage s posted k's input gradient for s - 1. -1 until posted. A send carries the end
  // time of the compute before it, as transfers take no time.
  std::vector<std::vector<double>> act_ready(p, std::vector<double>(m, -1));
  std::vector<std::vector<double>> grad_ready(p, std::vector<double>(m, -1));
  std::vector<size_t> next(p, 0);
  std::vector<double> clock(p, 0);
  // Sweep the stages, running each as far as its receives allow, until all are done; a sweep
  // that moves no stage would be a deadlock.
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < p; ++s) {
      for (; next[s] < lists[s].size(); ++next[s]) {
        const Action& a = lists[s][next[s]];
        const int k = a.micro_batch;
        if (a.type == ActionType::kRecvActivation) {
          if (act_ready[s - 1][k] < 0) break;
          clock[s] = std::max(clock[s], act_ready[s - 1][k]);
        } else if (a.type == ActionType::kRecvGrad) {
          if (grad_ready[s + 1][k] < 0) break;
          clock[s] = std::max(clock[s], grad_ready[s + 1][k]);
        } else if (a.type == ActionType::kSendActivation) {
          act_ready[s][k] = clock[s];
        } else if (a.type == ActionType::kSendGrad) {
          grad_ready[s][k] = clock[s];
        } else {
          clock[s] += 1;
        }
        moved = true;
      }
    }
  }
  for (int s = 0; s < p; ++s)
    FEAST_CHECK(next[s] == lists[s].size(),
                to_string(kind) << " schedule deadlocks on stage " << s);
  const double makespan = *std::max_element(clock.begin(), clock.end());
  const double busy = 2.0 * m * p;
  return 1.0 - busy / (p * makespan);
}

}  // namespace feast
