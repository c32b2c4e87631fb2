#include "parallel/pipeline/pipeline_executor.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"

namespace feast {

int PipelineExecutor::slots_needed(ScheduleKind kind, int stages, int stage, int micro_batches, int virtual_stages) {
  return max_in_flight(build_schedule(kind, stages, stage, micro_batches, virtual_stages));
}

PipelineExecutor::PipelineExecutor(PipelineStage& stage, Communicator* pp, ScheduleKind kind, int micro_batches,
                                   int B, int T, int virtual_stages)
    : stage_(stage),
      pp_(pp),
      micro_batches_(micro_batches),
      B_(B),
      T_(T),
      virtual_stages_(virtual_stages),
      act_elems_(stage.activation_numel(B, T)) {
  if (pp_) {
    stages_ = pp_->size();
    stage_index_ = pp_->rank();
  }
  FEAST_CHECK(virtual_stages >= 1 && stage.slots() % virtual_stages == 0,
              "a stage of " << stage.slots() << " slots does not hold " << virtual_stages << " chunks");
  slots_per_chunk_ = stage.slots() / virtual_stages;
  train_actions_ = build_schedule(kind, stages_, stage_index_, micro_batches, virtual_stages);
  FEAST_CHECK(max_in_flight(train_actions_) <= slots_per_chunk_,
              "stage has " << slots_per_chunk_ << " activation slots per chunk, the schedule needs "
                           << max_in_flight(train_actions_));
  // A split backward's weight passes may run while the next activation arrives, and may still
  // read the slot it would arrive in: it lands in the stage's arrival() and moves into its slot
  // at the forward.
  for (const Action& a : train_actions_) split_ = split_ || a.type == ActionType::kBackwardWeight;
  FEAST_CHECK(!split_ || stage_index_ == 0 || stage.arrival().numel >= act_elems_,
              "a split backward's stage needs an arrival buffer (StageShape::split_backward)");
  tokens_.resize(size_t(B) * size_t(T));
  targets_.resize(size_t(B) * size_t(T));
  positions_.resize(size_t(B) * size_t(T));
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

void PipelineExecutor::send_grad_copy(int peer, int tag) {
  auto free = std::find_if(outgoing_grads_.begin(), outgoing_grads_.end(),
                           [](const OutgoingGrad& g) { return !g.send || g.send->test(); });
  if (free == outgoing_grads_.end()) {
    const TensorView grad = stage_.input_grad();
    outgoing_grads_.push_back({stage_.backend().allocate(grad.dtype, act_elems_), nullptr});
    free = outgoing_grads_.end() - 1;
  }
  wait_send(free->send);  // finished: this only releases it
  stage_.backend().copy(free->data.view(), stage_.input_grad().first(act_elems_));
  free->send = send(free->data.view(), peer, tag);
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

double PipelineExecutor::train(const BatchFill& fill, GradientSync& sync, float loss_scale, int64_t step,
                               int64_t first_sequence, int64_t step_micro_batches) {
  double loss_sum = 0;
  // Backwards so far per chunk: a chunk's last one is the last to write its gradients (the
  // sink reduces them during it).
  std::vector<int> backwards(size_t(virtual_stages_), 0);
  auto last_backward = [&](int chunk) { return ++backwards[size_t(chunk)] == micro_batches_; };
  for (size_t i = 0; i < train_actions_.size(); ++i) {
    const Action& a = train_actions_[i];
    const int k = a.micro_batch, c = a.chunk, slot = slot_of(k, c);
    switch (a.type) {
      case ActionType::kRecvActivation:
        if (finish_exchange(i)) break;
        wait_send(act_sends_[size_t(slot)]);
        recv(arriving_activation(slot), upstream(c), activation_tag(k, upstream_chunk(c)));
        break;
      case ActionType::kForward: {
        wait_send(act_sends_[size_t(slot)]);  // the slot's previous output may still be sending
        if (split_ && stage_index_ > 0)
          stage_.backend().copy(stage_.input(slot).first(act_elems_), stage_.arrival().first(act_elems_));
        if (stage_.reads_batch(slot)) {
          Timer load;
          fill(k, tokens_.data(), targets_.data(), positions_.data());  // the stage keeps its own copies
          times_.data += load.seconds();
        }
        Timer t;
        loss_sum += stage_.forward(slot, tokens_.data(), targets_.data(), positions_.data(), B_, T_, loss_scale,
                                   MicroBatchPlace{step, first_sequence + int64_t{k} * B_,
                                                   1.0 / double(std::max<int64_t>(1, step_micro_batches))});
        times_.compute += compute_seconds(t);
        break;
      }
      case ActionType::kSendActivation:
        if (a.with_next) {  // with the receive of the gradient that follows, from the same stage
          wait_send(grad_send_);  // output_grad() and input_grad() share one buffer
          const Action& r = train_actions_[next_transfer(i)];
          post_exchange(i, stage_.output(slot), downstream(c), activation_tag(k, c), stage_.output_grad(),
                        downstream(r.chunk), gradient_tag(r.micro_batch, r.chunk));
        } else {
          act_sends_[size_t(slot)] = send(stage_.output(slot), downstream(c), activation_tag(k, c));
        }
        break;
      case ActionType::kRecvGrad:
        if (finish_exchange(i)) break;
        wait_send(grad_send_);  // output_grad() and input_grad() share one buffer
        recv(stage_.output_grad(), downstream(c), gradient_tag(k, c));
        break;
      case ActionType::kBackward:
      case ActionType::kBackwardInput: {
        wait_send(grad_send_);
        const bool whole = a.type == ActionType::kBackward;
        if (whole) sync.set_last_micro_batch(last_backward(c));
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
        sync.set_last_micro_batch(last_backward(c));
        Timer t;
        stage_.backward_weight(slot, B_, T_);
        times_.compute += compute_seconds(t);
        break;
      }
      case ActionType::kSendGrad:
        if (a.with_next) {  // with the receive of the activation that follows, from the same stage
          const Action& r = train_actions_[next_transfer(i)];
          const int next_slot = slot_of(r.micro_batch, r.chunk);
          wait_send(act_sends_[size_t(next_slot)]);
          post_exchange(i, stage_.input_grad(), upstream(c), gradient_tag(k, upstream_chunk(c)),
                        arriving_activation(next_slot), upstream(r.chunk),
                        activation_tag(r.micro_batch, upstream_chunk(r.chunk)));
        } else if (virtual_stages_ > 1) {
          send_grad_copy(upstream(c), gradient_tag(k, upstream_chunk(c)));
        } else {
          grad_send_ = send(stage_.input_grad(), upstream(c), gradient_tag(k, upstream_chunk(c)));
        }
        break;
    }
  }
  FEAST_CHECK(!exchange_, "a paired transfer was never completed");
  for (WorkHandle& h : act_sends_) wait_send(h);
  wait_send(grad_send_);
  for (OutgoingGrad& g : outgoing_grads_) wait_send(g.send);
  const double tp = stage_.take_tp_comm_seconds();
  times_.tp_comm += tp;
  times_.compute -= tp;
  const double ep = stage_.take_ep_comm_seconds();
  times_.ep_comm += ep;
  times_.compute -= ep;
  const RingTraffic ring = stage_.take_ring_traffic();
  times_.ring += ring;
  times_.compute -= ring.wait_seconds;
  return loss_sum;
}

double PipelineExecutor::evaluate(int n, const BatchFill& fill) {
  double loss_sum = 0;
  // Each micro-batch through every chunk in turn (every rank goes in the same (micro-batch,
  // virtual stage) order, so the receives cannot wait in a cycle).
  for (int k = 0; k < n; ++k)
    for (int c = 0; c < virtual_stages_; ++c) {
      // One slot per chunk suffices: nothing is kept for a backward. Its output must have left
      // before the next forward overwrites it.
      const int slot = slot_of(0, c);
      wait_send(act_sends_[size_t(slot)]);
      if (upstream(c) >= 0) recv(stage_.input(slot), upstream(c), activation_tag(k, upstream_chunk(c)));
      if (stage_.reads_batch(slot)) fill(k, tokens_.data(), targets_.data(), positions_.data());
      loss_sum += stage_.forward(slot, tokens_.data(), targets_.data(), positions_.data(), B_, T_, 0.0f,
                                 MicroBatchPlace{});
      if (downstream(c) >= 0) act_sends_[size_t(slot)] = send(stage_.output(slot), downstream(c), activation_tag(k, c));
    }
  for (WorkHandle& h : act_sends_) wait_send(h);
  stage_.take_tp_comm_seconds();
  stage_.take_ep_comm_seconds();
  stage_.take_ring_traffic();
  return loss_sum;
}

StageTimes PipelineExecutor::take_times() {
  const StageTimes t = times_;
  times_ = {};
  return t;
}

}  // namespace feast
