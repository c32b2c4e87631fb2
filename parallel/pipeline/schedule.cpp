// Builds the 1F1B, GPipe and zero-bubble action lists of one stage and measures them: the
// activation memory they hold (max_in_flight) and the bubble of their ideal timeline
// (ideal_idle_fraction).
#include "parallel/pipeline/schedule.h"

#include <algorithm>
#include <deque>

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

// Time units of a compute action in the ideal timeline: a backward is twice a forward (two
// products per forward product), split evenly between its input and weight gradients.
double duration(ActionType type) { return type == ActionType::kBackward ? 2.0 : 1.0; }

// The 1F1B or GPipe list of one stage (build_schedule's description).
std::vector<Action> one_f_one_b_or_gpipe(ScheduleKind kind, int stages, int stage, int m) {
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

// Zero-bubble's lists for all stages at once, from 1F1B's: the ideal timeline of every stage is
// run (one unit per forward, input-gradient and weight-gradient pass; transfers take no time)
// and each stage does a pending weight pass wherever its next compute would otherwise wait a
// unit or more for its input, or take a p+1-th micro-batch; the rest at the end. The weight
// pass goes in front of the receive that precedes the compute, so a paired send and receive
// (Action::with_next) stay a pair with the weight pass between them.
std::vector<std::vector<Action>> zero_bubble_lists(int p, int m) {
  using A = ActionType;
  const size_t P = static_cast<size_t>(p);
  std::vector<std::vector<Action>> base, out(P);
  for (int s = 0; s < p; ++s) base.push_back(one_f_one_b_or_gpipe(ScheduleKind::kOneFOneB, p, s, m));
  // When stage s posted micro-batch k's activation (for s + 1) and input gradient (for s - 1).
  std::vector<std::vector<double>> act_ready(P, std::vector<double>(static_cast<size_t>(m), -1));
  std::vector<std::vector<double>> grad_ready = act_ready;
  std::vector<size_t> next(P, 0);
  std::vector<double> clock(P, 0);
  std::vector<std::deque<int>> pending(P);  // micro-batches whose weight pass is due
  std::vector<int> held(P, 0);
  auto weight_pass = [&](size_t s) {
    out[s].push_back({A::kBackwardWeight, pending[s].front()});
    pending[s].pop_front();
    clock[s] += 1;
    --held[s];
  };
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t s = 0; s < P; ++s) {
      for (;;) {
        if (next[s] == base[s].size()) {
          while (!pending[s].empty()) weight_pass(s), moved = true;
          break;
        }
        const Action a = base[s][next[s]];
        const size_t k = size_t(a.micro_batch);
        if (a.type == A::kSendActivation || a.type == A::kSendGrad) {
          (a.type == A::kSendActivation ? act_ready : grad_ready)[s][k] = clock[s];
          out[s].push_back(a);
          ++next[s];
          moved = true;
          continue;
        }
        // A compute, or a receive and the compute that needs it.
        const bool receive = !is_compute(a.type);
        const Action c = receive ? base[s][next[s] + 1] : a;
        double ready = clock[s];
        if (receive) {
          ready = a.type == A::kRecvActivation ? act_ready[s - 1][k] : grad_ready[s + 1][k];
          if (ready < 0) break;  // not posted yet: come back when the neighbour has run further
        }
        const bool full = c.type == A::kForward && held[s] >= p;
        if (!pending[s].empty() && (full || ready - clock[s] >= 1)) {
          weight_pass(s);
          moved = true;
          continue;
        }
        if (receive) out[s].push_back(a);
        clock[s] = std::max(clock[s], ready) + 1;
        if (c.type == A::kForward) {
          ++held[s];
          out[s].push_back(c);
        } else {
          out[s].push_back({A::kBackwardInput, c.micro_batch});
          pending[s].push_back(c.micro_batch);
        }
        next[s] += receive ? 2 : 1;
        moved = true;
      }
    }
  }
  for (int s = 0; s < p; ++s)
    FEAST_CHECK(next[size_t(s)] == base[size_t(s)].size(), "zero-bubble schedule deadlocks on stage " << s);
  return out;
}

}  // namespace

bool is_compute(ActionType type) {
  return type == ActionType::kForward || type == ActionType::kBackward || type == ActionType::kBackwardInput ||
         type == ActionType::kBackwardWeight;
}

ScheduleKind parse_schedule_kind(const std::string& name) {
  if (name == "1f1b") return ScheduleKind::kOneFOneB;
  if (name == "gpipe") return ScheduleKind::kGPipe;
  if (name == "zero-bubble") return ScheduleKind::kZeroBubble;
  throw ConfigError("parallel.schedule = \"" + name + "\": expected \"1f1b\", \"gpipe\" or \"zero-bubble\"");
}

std::string to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kOneFOneB: return "1f1b";
    case ScheduleKind::kGPipe: return "gpipe";
    case ScheduleKind::kZeroBubble: return "zero-bubble";
  }
  return "?";
}

std::vector<Action> build_schedule(ScheduleKind kind, int stages, int stage, int micro_batches) {
  check_shape(stages, micro_batches);
  FEAST_CHECK(stage >= 0 && stage < stages,
              "stage " << stage << " outside " << stages << " stages");
  if (kind == ScheduleKind::kZeroBubble) return zero_bubble_lists(stages, micro_batches)[size_t(stage)];
  return one_f_one_b_or_gpipe(kind, stages, stage, micro_batches);
}

int max_in_flight(const std::vector<Action>& actions) {
  int held = 0, most = 0;
  for (const Action& a : actions) {
    if (a.type == ActionType::kForward) most = std::max(most, ++held);
    if (a.type == ActionType::kBackward || a.type == ActionType::kBackwardWeight) --held;
  }
  return most;
}

double idle_fraction_formula(ScheduleKind kind, int stages, int micro_batches) {
  check_shape(stages, micro_batches);
  const int p = stages, m = micro_batches;
  if (kind != ScheduleKind::kZeroBubble) return double(p - 1) / double(m + p - 1);
  return m >= p ? double(p - 1) / double(3 * m + p - 1) : ideal_idle_fraction(kind, p, m);
}

const char* idle_fraction_formula_text(ScheduleKind kind, int stages, int micro_batches) {
  if (kind != ScheduleKind::kZeroBubble) return "(p-1)/(m+p-1)";
  return micro_batches >= stages ? "(p-1)/(3m+p-1)" : "(its ideal timeline: the formula (p-1)/(3m+p-1) needs m >= p)";
}

double ideal_idle_fraction(ScheduleKind kind, int stages, int micro_batches) {
  check_shape(stages, micro_batches);
  const int p = stages, m = micro_batches;
  // Zero-bubble's lists come out of one simulation of all stages, the others stage by stage.
  std::vector<std::vector<Action>> lists;
  if (kind == ScheduleKind::kZeroBubble)
    lists = zero_bubble_lists(p, m);
  else
    for (int s = 0; s < p; ++s) lists.push_back(one_f_one_b_or_gpipe(kind, p, s, m));
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
          clock[s] += duration(a.type);
        }
        moved = true;
      }
    }
  }
  for (int s = 0; s < p; ++s)
    FEAST_CHECK(next[s] == lists[s].size(),
                to_string(kind) << " schedule deadlocks on stage " << s);
  const double makespan = *std::max_element(clock.begin(), clock.end());
  const double busy = 3.0 * m * p;  // a forward and a whole backward per micro-batch and stage
  return 1.0 - busy / (p * makespan);
}

}  // namespace feast
