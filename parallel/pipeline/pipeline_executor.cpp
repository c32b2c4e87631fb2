#include "parallel/pipeline/pipeline_executor.h"

#include "core/error.h"
#include "core/timer.h"

namespace feast {
namespace {
// Tags keep micro-batches and directions apart on the pipeline group.
int activation_tag(int k) { return 2 * k; }
int gradient_tag(int k) { return 2 * k + 1; }
}  // namespace

int PipelineExecutor::slots_needed(ScheduleKind kind, int stages, int stage, int micro_batches) {
  return max_in_flight(build_schedule(kind, stages, stage, micro_batches));
}

PipelineExecutor::PipelineExecutor(PipelineStage& stage, Communicator* pp, ScheduleKind kind, int micro_batches,
                                   int B, int T)
    : stage_(stage), pp_(pp), micro_batches_(micro_batches), B_(B), T_(T), act_elems_(stage.activation_numel(B, T)) {
  if (pp_) {
    stages_ = pp_->size();
    stage_index_ = pp_->rank();
  }
  train_actions_ = build_schedule(kind, stages_, stage_index_, micro_batches);
  FEAST_CHECK(max_in_flight(train_actions_) <= stage.slots(),
              "stage has " << stage.slots() << " activation slots, the schedule needs " << max_in_flight(train_actions_));
  // A split backward's weight passes may run while the next activation arrives, and may still
  // read the slot it would arrive in: it lands in the stage's arrival() and moves into its slot
  // at the forward.
  for (const Action& a : train_actions_) split_ = split_ || a.type == ActionType::kBackwardWeight;
  FEAST_CHECK(!split_ || stage_index_ == 0 || stage.arrival().numel >= act_elems_,
              "a split backward's stage needs an arrival buffer (StageShape::split_backward)");
  tokens_.resize(size_t(B) * size_t(T));
  targets_.resize(size_t(B) * size_t(T));
  act_sends_.resize(size_t(stage.slots()));
}

void PipelineExecutor::wait_send(WorkHandle& h) {
  if (!h) return;
  Timer t;
  h->wait();
  h.reset();
  times_.send_wait += t.seconds();
}

void PipelineExecutor::recv(const TensorView& into, int peer, int tag) {
  const TensorView dst = into.first(act_elems_);
  Timer t;
  pp_->recv(dst.data, dst.numel, dst.dtype, peer, tag)->wait();
  times_.pp_wait += t.seconds();
}

WorkHandle PipelineExecutor::send(const TensorView& data, int peer, int tag) {
  const TensorView src = data.first(act_elems_);
  return pp_->send(src.data, src.numel, src.dtype, peer, tag);
}

void PipelineExecutor::post_exchange(size_t at, const TensorView& out, int to, int send_tag, const TensorView& into,
                                     int from, int recv_tag) {
  const TensorView src = out.first(act_elems_), dst = into.first(act_elems_);
  exchange_ = pp_->sendrecv(src.data, src.numel, to, send_tag, dst.data, dst.numel, from, recv_tag, src.dtype);
  exchange_at_ = next_transfer(at);
}

bool PipelineExecutor::finish_exchange(size_t at) {
  if (!exchange_ || exchange_at_ != at) return false;
  Timer t;
  exchange_->wait();
  exchange_.reset();
  times_.pp_wait += t.seconds();
  return true;
}

TensorView PipelineExecutor::arriving_activation(int slot) {
  return split_ ? stage_.arrival() : stage_.input(slot);
}

size_t PipelineExecutor::next_transfer(size_t at) const {
  size_t j = at + 1;
  while (j < train_actions_.size() && is_compute(train_actions_[j].type)) ++j;
  FEAST_CHECK(j < train_actions_.size(), "a paired send without a receive after it");
  return j;
}

double PipelineExecutor::compute_seconds(const Timer& t) {
  // A GPU's queued work is part of this forward or backward, not of whatever waits next.
  stage_.backend().stream().synchronize();
  return t.seconds();
}

double PipelineExecutor::train(const BatchFill& fill, GradientSync& sync, float loss_scale) {
  const int slots = stage_.slots();
  double loss_sum = 0;
  int backwards = 0;
  for (size_t i = 0; i < train_actions_.size(); ++i) {
    const Action& a = train_actions_[i];
    const int k = a.micro_batch, slot = k % slots;
    switch (a.type) {
      case ActionType::kRecvActivation:
        if (finish_exchange(i)) break;
        wait_send(act_sends_[size_t(slot)]);
        recv(arriving_activation(slot), stage_index_ - 1, activation_tag(k));
        break;
      case ActionType::kForward: {
        wait_send(act_sends_[size_t(slot)]);  // the slot's previous output may still be sending
        if (split_ && stage_index_ > 0)
          stage_.backend().copy(stage_.input(slot).first(act_elems_), stage_.arrival().first(act_elems_));
        Timer load;
        fill(k, tokens_.data(), targets_.data());  // the stage keeps its own copy for the backward
        times_.data += load.seconds();
        Timer t;
        loss_sum += stage_.forward(slot, tokens_.data(), targets_.data(), B_, T_, loss_scale);
        times_.compute += compute_seconds(t);
        break;
      }
      case ActionType::kSendActivation:
        if (a.with_next) {  // with the receive of the gradient that follows, from the same stage
          wait_send(grad_send_);  // output_grad() and input_grad() share one buffer
          const int j = train_actions_[next_transfer(i)].micro_batch;
          post_exchange(i, stage_.output(slot), stage_index_ + 1, activation_tag(k), stage_.output_grad(),
                        stage_index_ + 1, gradient_tag(j));
        } else {
          act_sends_[size_t(slot)] = send(stage_.output(slot), stage_index_ + 1, activation_tag(k));
        }
        break;
      case ActionType::kRecvGrad:
        if (finish_exchange(i)) break;
        wait_send(grad_send_);  // output_grad() and input_grad() share one buffer
        recv(stage_.output_grad(), stage_index_ + 1, gradient_tag(k));
        break;
      case ActionType::kBackward:
      case ActionType::kBackwardInput: {
        wait_send(grad_send_);
        const bool whole = a.type == ActionType::kBackward;
        if (whole) sync.set_last_micro_batch(++backwards == micro_batches_);
        Timer t;
        if (whole)
          stage_.backward(slot, B_, T_);
        else
          stage_.backward_input(slot, B_, T_);
        times_.compute += compute_seconds(t);
        break;
      }
      case ActionType::kBackwardWeight: {
        // It adds gradients only; an exchange in flight writes output_grad() or arrival(),
        // which it does not read.
        sync.set_last_micro_batch(++backwards == micro_batches_);
        Timer t;
        stage_.backward_weight(slot, B_, T_);
        times_.compute += compute_seconds(t);
        break;
      }
      case ActionType::kSendGrad:
        if (a.with_next) {  // with the receive of the activation that follows, from the same stage
          const int next = train_actions_[next_transfer(i)].micro_batch, next_slot = next % slots;
          wait_send(act_sends_[size_t(next_slot)]);
          post_exchange(i, stage_.input_grad(), stage_index_ - 1, gradient_tag(k), arriving_activation(next_slot),
                        stage_index_ - 1, activation_tag(next));
        } else {
          grad_send_ = send(stage_.input_grad(), stage_index_ - 1, gradient_tag(k));
        }
        break;
    }
  }
  FEAST_CHECK(!exchange_, "a paired transfer was never completed");
  for (WorkHandle& h : act_sends_) wait_send(h);
  wait_send(grad_send_);
  const double tp = stage_.take_tp_comm_seconds();
  times_.tp_comm += tp;
  times_.compute -= tp;
  const RingTraffic ring = stage_.take_ring_traffic();
  times_.ring += ring;
  times_.compute -= ring.wait_seconds;
  return loss_sum;
}

double PipelineExecutor::evaluate(int n, const BatchFill& fill) {
  double loss_sum = 0;
  for (int k = 0; k < n; ++k) {
    // One slot suffices: nothing is kept for a backward. Its output must have left before the
    // next forward overwrites it.
    wait_send(act_sends_[0]);
    if (stage_index_ > 0) recv(stage_.input(0), stage_index_ - 1, activation_tag(k));
    fill(k, tokens_.data(), targets_.data());
    loss_sum += stage_.forward(0, tokens_.data(), targets_.data(), B_, T_, 0.0f);
    if (stage_index_ < stages_ - 1)
      act_sends_[0] = send(stage_.output(0), stage_index_ + 1, activation_tag(k));
  }
  wait_send(act_sends_[0]);
  stage_.take_tp_comm_seconds();
  stage_.take_ring_traffic();
  return loss_sum;
}

StageTimes PipelineExecutor::take_times() {
  const StageTimes t = times_;
  times_ = {};
  return t;
}

}  // namespace feast
