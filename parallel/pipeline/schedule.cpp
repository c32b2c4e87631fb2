// Builds the 1F1B, GPipe, zero-bubble and interleaved 1F1B action lists of one stage and measures them: the
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
  int stages, stage, chunks = 1;
  std::vector<Action> actions;

  // send_with_next: the send goes out together with the receive that follows it.
  void forward(int k, bool send_with_next = false, int c = 0) {
    if (upstream_stage(stages, stage, c) >= 0) actions.push_back({ActionType::kRecvActivation, k, false, c});
    actions.push_back({ActionType::kForward, k, false, c});
    if (downstream_stage(stages, stage, c, chunks) >= 0)
      actions.push_back({ActionType::kSendActivation, k, send_with_next, c});
  }
  void backward(int k, bool send_with_next = false, int c = 0) {
    if (downstream_stage(stages, stage, c, chunks) >= 0) actions.push_back({ActionType::kRecvGrad, k, false, c});
    actions.push_back({ActionType::kBackward, k, false, c});
    if (upstream_stage(stages, stage, c) >= 0) actions.push_back({ActionType::kSendGrad, k, send_with_next, c});
  }
};

// Interleaved 1F1B (build_schedule's description; Megatron-LM's
// forward_backward_pipelining_with_interleaving). Stage s runs forwards ahead until the first
// gradient can come back: twice its distance to the last stage (each forward and backward of
// the last chunk takes a lap) plus the chunks before the last one for all p stages.
std::vector<Action> interleaved(int p, int s, int m, int v) {
  Builder b{p, s, v, {}};
  const int total = m * v, group = p * v;
  const int warmup = std::min((p - s - 1) * 2 + (v - 1) * p, total);
  auto micro_batch = [&](int k) { return (k / group) * p + k % p; };
  auto forward_chunk = [&](int k) { return (k % group) / p; };
  auto backward_chunk = [&](int k) { return v - 1 - (k % group) / p; };
  for (int k = 0; k < warmup; ++k) b.forward(micro_batch(k), false, forward_chunk(k));
  for (int i = 0; i < total - warmup; ++i) {
    b.forward(micro_batch(warmup + i), false, forward_chunk(warmup + i));
    b.backward(micro_batch(i), false, backward_chunk(i));
  }
  for (int k = total - warmup; k < total; ++k) b.backward(micro_batch(k), false, backward_chunk(k));
  return b.actions;
}

// Time units of a compute action in the ideal timeline: a backward is twice a forward (two
// products per forward product), split evenly between its input and weight gradients.
double duration(ActionType type) { return type == ActionType::kBackward ? 2.0 : 1.0; }

// The 1F1B or GPipe list of one stage (build_schedule's description).
std::vector<Action> one_f_one_b_or_gpipe(ScheduleKind kind, int stages, int stage, int m) {
  Builder b{stages, stage, 1, {}};
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

std::vector<Action> one_stage_list(ScheduleKind kind, int p, int s, int m, int v) {
  return kind == ScheduleKind::kInterleaved ? interleaved(p, s, m, v) : one_f_one_b_or_gpipe(kind, p, s, m);
}

void check_virtual_stages(ScheduleKind kind, int stages, int micro_batches, int virtual_stages) {
  if (kind != ScheduleKind::kInterleaved) {
    FEAST_CHECK(virtual_stages == 1, to_string(kind) << " runs one chunk per stage, not " << virtual_stages);
    return;
  }
  if (virtual_stages < 2)
    throw ConfigError("parallel.schedule = \"interleaved-1f1b\" needs parallel.virtual_stages >= 2, got " +
                      std::to_string(virtual_stages));
  if (stages < 2)
    throw ConfigError("parallel.schedule = \"interleaved-1f1b\" needs parallel.pp >= 2 (it interleaves chunks of "
                      "layers over pipeline stages)");
  if (micro_batches % stages != 0)
    throw ConfigError("parallel.schedule = \"interleaved-1f1b\" runs micro-batches in groups of parallel.pp = " +
                      std::to_string(stages) + ", but a step has " + std::to_string(micro_batches) +
                      " per data-parallel rank; make the micro-batches a multiple of " + std::to_string(stages));
}

}  // namespace

int upstream_stage(int stages, int stage, int chunk) {
  if (stage > 0) return stage - 1;
  return chunk > 0 ? stages - 1 : -1;
}

int downstream_stage(int stages, int stage, int chunk, int virtual_stages) {
  if (stage < stages - 1) return stage + 1;
  return chunk < virtual_stages - 1 ? 0 : -1;
}

int upstream_chunk(int stage, int chunk) { return stage > 0 ? chunk : chunk - 1; }
int downstream_chunk(int stages, int stage, int chunk) { return stage < stages - 1 ? chunk : chunk + 1; }

bool is_compute(ActionType type) {
  return type == ActionType::kForward || type == ActionType::kBackward || type == ActionType::kBackwardInput ||
         type == ActionType::kBackwardWeight;
}

ScheduleKind parse_schedule_kind(const std::string& name) {
  if (name == "1f1b") return ScheduleKind::kOneFOneB;
  if (name == "gpipe") return ScheduleKind::kGPipe;
  if (name == "zero-bubble") return ScheduleKind::kZeroBubble;
  if (name == "interleaved-1f1b") return ScheduleKind::kInterleaved;
  throw ConfigError("parallel.schedule = \"" + name +
                    "\": expected \"1f1b\", \"gpipe\", \"zero-bubble\" or \"interleaved-1f1b\"");
}

std::string to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kOneFOneB: return "1f1b";
    case ScheduleKind::kGPipe: return "gpipe";
    case ScheduleKind::kZeroBubble: return "zero-bubble";
    case ScheduleKind::kInterleaved: return "interleaved-1f1b";
  }
  return "?";
}

std::vector<Action> build_schedule(ScheduleKind kind, int stages, int stage, int micro_batches, int virtual_stages) {
  check_shape(stages, micro_batches);
  check_virtual_stages(kind, stages, micro_batches, virtual_stages);
  FEAST_CHECK(stage >= 0 && stage < stages,
              "stage " << stage << " outside " << stages << " stages");
  if (kind == ScheduleKind::kZeroBubble) return zero_bubble_lists(stages, micro_batches)[size_t(stage)];
  return one_stage_list(kind, stages, stage, micro_batches, virtual_stages);
}

namespace {
// The most micro-batches held at once, per chunk (max_in_flight) or over all (_total).
int most_held(const std::vector<Action>& actions, bool per_chunk) {
  std::vector<int> held;
  int total = 0, most = 0;
  for (const Action& a : actions) {
    if (size_t(a.chunk) >= held.size()) held.resize(size_t(a.chunk) + 1, 0);
    int& h = held[size_t(a.chunk)];
    if (a.type == ActionType::kForward) {
      ++h, ++total;
      most = std::max(most, per_chunk ? h : total);
    }
    if (a.type == ActionType::kBackward || a.type == ActionType::kBackwardWeight) --h, --total;
  }
  return most;
}
}  // namespace

int max_in_flight(const std::vector<Action>& actions) { return most_held(actions, true); }
int max_in_flight_total(const std::vector<Action>& actions) { return most_held(actions, false); }

double idle_fraction_formula(ScheduleKind kind, int stages, int micro_batches, int virtual_stages) {
  check_shape(stages, micro_batches);
  const int p = stages, m = micro_batches;
  if (kind == ScheduleKind::kInterleaved) return double(p - 1) / double(virtual_stages * m + p - 1);
  if (kind != ScheduleKind::kZeroBubble) return double(p - 1) / double(m + p - 1);
  return m >= p ? double(p - 1) / double(3 * m + p - 1) : ideal_idle_fraction(kind, p, m);
}

const char* idle_fraction_formula_text(ScheduleKind kind, int stages, int micro_batches) {
  if (kind == ScheduleKind::kInterleaved) return "(p-1)/(vm+p-1)";
  if (kind != ScheduleKind::kZeroBubble) return "(p-1)/(m+p-1)";
  return micro_batches >= stages ? "(p-1)/(3m+p-1)" : "(its ideal timeline: the formula (p-1)/(3m+p-1) needs m >= p)";
}

double ideal_idle_fraction(ScheduleKind kind, int stages, int micro_batches, int virtual_stages) {
  check_shape(stages, micro_batches);
  check_virtual_stages(kind, stages, micro_batches, virtual_stages);
  const int p = stages, m = micro_batches, v = virtual_stages;
  // Zero-bubble's lists come out of one simulation of all stages, the others stage by stage.
  std::vector<std::vector<Action>> lists;
  if (kind == ScheduleKind::kZeroBubble)
    lists = zero_bubble_lists(p, m);
  else
    for (int s = 0; s < p; ++s) lists.push_back(one_stage_list(kind, p, s, m, v));
  // act_ready[s][c][k]: when stage s posted micro-batch k's activation out of chunk c;
  // grad_ready[s][c][k]: when it posted k's gradient into chunk c. -1 until posted. A send
  // carries the end time of the compute before it, as transfers take no time.
  using Times = std::vector<std::vector<std::vector<double>>>;
  Times act_ready(size_t(p), std::vector<std::vector<double>>(size_t(v), std::vector<double>(size_t(m), -1)));
  Times grad_ready = act_ready;
  std::vector<size_t> next(size_t(p), 0);
  std::vector<double> clock(size_t(p), 0);
  // Sweep the stages, running each as far as its receives allow, until all are done; a sweep
  // that moves no stage would be a deadlock.
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < p; ++s) {
      const size_t S = size_t(s);
      for (; next[S] < lists[S].size(); ++next[S]) {
        const Action& a = lists[S][next[S]];
        const size_t k = size_t(a.micro_batch), c = size_t(a.chunk);
        if (a.type == ActionType::kRecvActivation) {
          const double ready = act_ready[size_t(upstream_stage(p, s, a.chunk))][size_t(upstream_chunk(s, a.chunk))][k];
          if (ready < 0) break;
          clock[S] = std::max(clock[S], ready);
        } else if (a.type == ActionType::kRecvGrad) {
          const double ready =
              grad_ready[size_t(downstream_stage(p, s, a.chunk, v))][size_t(downstream_chunk(p, s, a.chunk))][k];
          if (ready < 0) break;
          clock[S] = std::max(clock[S], ready);
        } else if (a.type == ActionType::kSendActivation) {
          act_ready[S][c][k] = clock[S];
        } else if (a.type == ActionType::kSendGrad) {
          grad_ready[S][c][k] = clock[S];
        } else {
          clock[S] += duration(a.type);
        }
        moved = true;
      }
    }
  }
  for (int s = 0; s < p; ++s)
    FEAST_CHECK(next[size_t(s)] == lists[size_t(s)].size(), to_string(kind) << " schedule deadlocks on stage " << s);
  const double makespan = *std::max_element(clock.begin(), clock.end());
  const double busy = 3.0 * m * v * p;  // a forward and a whole backward per micro-batch, chunk and stage
  return 1.0 - busy / (p * makespan);
}

}  // namespace feast
