// Short training runs on the synthetic corpus: the loss falls below a stated threshold, metrics
// are written, runs are bit-for-bit repeatable, and the micro-batch split of a global batch
// does not change the math.
#include "train/train_loop.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "data/sampler.h"
#include "comm/self_communicator.h"

namespace feast {
namespace {

namespace fs = std::filesystem;

class TrainLoop : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "feast_train_loop_" + std::to_string(::getpid()));
    PrepareOptions o;
    o.out_dir = *dir_ + "/data";
    prepared_ = new PreparedData(prepare_synthetic(400'000, 1, o));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete prepared_;
  }

  static Config small_config(const std::string& run) {
    Config c;
    c.model.n_layer = 2;
    c.model.n_head = 4;
    c.model.n_embd = 64;
    c.model.vocab_size = 256;
    c.model.max_seq_len = 64;
    c.training.seq_len = 32;
    c.training.steps = 150;
    c.training.lr = 3e-3;
    c.training.min_lr = 3e-4;
    c.training.warmup_steps = 10;
    c.training.eval_interval = 50;
    c.training.eval_batches = 4;
    c.parallel.micro_batch_size = 8;
    c.data.train = *dir_ + "/data/train_*.bin";
    c.data.val = *dir_ + "/data/val_*.bin";
    c.logging.dir = *dir_ + "/" + run;
    c.logging.interval = 1000;
    return c;
  }

  static std::vector<nlohmann::json> read_metrics(const Config& c) {
    std::ifstream in(c.logging.dir + "/metrics.jsonl");
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
    return lines;
  }

  static std::string* dir_;
  static PreparedData* prepared_;
};
std::string* TrainLoop::dir_ = nullptr;
PreparedData* TrainLoop::prepared_ = nullptr;

TEST_F(TrainLoop, ValidationLossFallsTowardsTheEntropyFloor) {
  const Config c = small_config("learn");
  const TrainSummary s = train(c, make_self_communicator());
  ASSERT_TRUE(s.final_val_loss.has_value());
  // ln 256 = 5.55 at start; the unigram entropy is 2.81 and a model that knows the last
  // character's successor set reaches ln 4 = 1.39; the floor is 0.80.
  ASSERT_TRUE(prepared_->entropy_floor.has_value());
  EXPECT_LT(*s.final_val_loss, 1.35) << "floor " << *prepared_->entropy_floor;
  EXPECT_GT(*s.final_val_loss, *prepared_->entropy_floor - 0.02);

  const auto lines = read_metrics(c);
  ASSERT_EQ(lines.size(), 150u);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["step"], int(i) + 1);
    for (const char* key : {"loss", "lr", "grad_norm", "tokens_per_s"}) EXPECT_TRUE(lines[i].contains(key)) << key;
    EXPECT_EQ(lines[i].contains("val_loss"), (i + 1) % 50 == 0) << "step " << i + 1;
  }
  EXPECT_GT(lines.front()["loss"].get<double>(), 5.0);
  // The cosine schedule ends at min_lr on the last step that runs.
  EXPECT_DOUBLE_EQ(lines.back()["lr"].get<double>(), c.training.min_lr);
  EXPECT_GT(lines[lines.size() - 2]["lr"].get<double>(), c.training.min_lr);
  EXPECT_TRUE(fs::exists(c.logging.dir + "/config.toml"));
}

TEST_F(TrainLoop, SameSeedIsBitForBitRepeatable) {
  Config a = small_config("repeat_a"), b = small_config("repeat_b");
  a.training.steps = b.training.steps = 5;
  train(a, make_self_communicator());
  train(b, make_self_communicator());
  const auto la = read_metrics(a), lb = read_metrics(b);
  ASSERT_EQ(la.size(), 5u);
  for (size_t i = 0; i < la.size(); ++i) {
    EXPECT_EQ(la[i]["loss"].get<double>(), lb[i]["loss"].get<double>());
    EXPECT_EQ(la[i]["grad_norm"].get<double>(), lb[i]["grad_norm"].get<double>());
  }
  Config other = small_config("repeat_other");
  other.training.steps = 5;
  other.training.seed = 7;
  train(other, make_self_communicator());
  EXPECT_NE(read_metrics(other)[0]["loss"].get<double>(), la[0]["loss"].get<double>());
}

TEST_F(TrainLoop, MicroBatchSplitDoesNotChangeTheMath) {
  // The same global batch of 8 sequences as 1 x 8 and as 4 x 2 micro-batches.
  Config whole = small_config("split_whole"), split = small_config("split_four");
  whole.training.steps = split.training.steps = 6;
  split.parallel.micro_batch_size = 2;
  split.parallel.num_micro_batches = 4;
  train(whole, make_self_communicator());
  train(split, make_self_communicator());
  const auto lw = read_metrics(whole), ls = read_metrics(split);
  ASSERT_EQ(lw.size(), ls.size());
  for (size_t i = 0; i < lw.size(); ++i) {
    const double a = lw[i]["loss"].get<double>(), b = ls[i]["loss"].get<double>();
    EXPECT_NEAR(a, b, 1e-5 * a) << "step " << i + 1;
    const double ga = lw[i]["grad_norm"].get<double>(), gb = ls[i]["grad_norm"].get<double>();
    EXPECT_NEAR(ga, gb, 1e-4 * ga) << "step " << i + 1;
  }
}

TEST_F(TrainLoop, EvalIntervalZeroNeverEvaluates) {
  Config c = small_config("no_eval");
  c.training.steps = 3;
  c.training.eval_interval = 0;
  const TrainSummary s = train(c, make_self_communicator());
  EXPECT_FALSE(s.final_val_loss.has_value());
  for (const auto& line : read_metrics(c)) EXPECT_FALSE(line.contains("val_loss")) << line;
}

TEST_F(TrainLoop, ValidationLossDoesNotDependOnTheMicroBatchSplit) {
  // eval_batches batches of the global batch (8 sequences), whatever the micro-batches.
  Config whole = small_config("val_whole"), split = small_config("val_split");
  whole.training.steps = split.training.steps = 2;
  whole.training.eval_interval = split.training.eval_interval = 2;
  split.parallel.micro_batch_size = 2;
  split.parallel.num_micro_batches = 4;
  const TrainSummary a = train(whole, make_self_communicator()), b = train(split, make_self_communicator());
  ASSERT_TRUE(a.final_val_loss && b.final_val_loss);
  EXPECT_NEAR(*a.final_val_loss, *b.final_val_loss, 1e-5 * *a.final_val_loss);
}

TEST_F(TrainLoop, LossIsTheMeanOverTheStepsCountedTargetsWhateverTheSplit) {
  // Document masks on the corpus's spaces leave out a different number of targets in each row,
  // so the micro-batches of a step count unevenly; the loss is still the mean over every counted
  // target of the step (not a mean of micro-batch means), so one micro-batch of 8 rows and 8 of
  // one give the same losses and gradient norms.
  Config whole = small_config("docs_whole"), split = small_config("docs_split");
  for (Config* c : {&whole, &split}) {
    c->training.steps = 3;
    c->training.eval_interval = 3;
    c->data.document_mask = true;
    c->data.eos_id = ' ';
  }
  split.parallel.micro_batch_size = 1;
  split.parallel.num_micro_batches = 8;
  const Dataset data(whole.data.train, Split::kTrain);
  const TrainSampler sampler(data, whole.training.seed, whole.training.seq_len, ' ');
  std::vector<int64_t> counts;
  for (int row = 0; row < 8; ++row) counts.push_back(sampler.counted_targets(0, row, 1));
  ASSERT_NE(*std::min_element(counts.begin(), counts.end()), *std::max_element(counts.begin(), counts.end()))
      << "the rows of step 0 should count different numbers of targets";
  std::vector<double> losses[2], norms[2];
  int i = 0;
  for (const Config* c : {&whole, &split}) {
    TrainHooks hooks;
    hooks.after_step = [&, i](TrainingRun&, const StepResult& r) {
      losses[i].push_back(r.loss);
      norms[i].push_back(r.grad_norm);
    };
    train(*c, make_self_communicator(), hooks);
    ++i;
  }
  ASSERT_EQ(losses[0].size(), 3u);
  ASSERT_EQ(losses[1].size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_NEAR(losses[0][s], losses[1][s], 1e-6 * losses[0][s]) << "step " << s + 1;
    EXPECT_NEAR(norms[0][s], norms[1][s], 1e-5 * norms[0][s]) << "step " << s + 1;
  }
}

TEST_F(TrainLoop, DocumentMasksOnUnpackedChatDataAreRefused) {
  // SmolLM2's template ends every turn with <|im_end|>, its end-of-text token: unpacked, a turn
  // would become a document of its own. prepare-data records that; the run refuses, naming the fix.
  PrepareOptions o;
  o.out_dir = *dir_ + "/chat";
  o.tokenizer = std::string(FEAST_SOURCE_DIR) + "/tests/fixtures/hf/chat/smollm2";
  o.val_fraction = 0.2;
  const std::string input = *dir_ + "/chats.jsonl";
  {
    std::ofstream f(input);
    for (int k = 0; k < 8; ++k)
      f << R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"}]})"
        << "\n";
  }
  const PreparedData d = prepare_text({input}, o);
  Config c = small_config("chat_masks");
  c.model.vocab_size = int(d.vocab_size);
  c.training.seq_len = 8;
  c.data.train = o.out_dir;
  c.data.val = "";
  c.data.document_mask = true;
  try {
    train(c, make_self_communicator());
    FAIL() << "expected an error";
  } catch (const AgreedError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("data.document_mask"), std::string::npos) << msg;
    EXPECT_NE(msg.find("of the documents of data.train"), std::string::npos) << msg;
    EXPECT_NE(msg.find("prepare-data --pack"), std::string::npos) << msg;
  }
}

TEST_F(TrainLoop, MissingDataIsAnErrorNamingTheKey) {
  Config c = small_config("missing");
  c.data.train = *dir_ + "/nothing/train_*.bin";
  try {
    train(c, make_self_communicator());
    FAIL() << "expected an error";
  } catch (const AgreedError& e) {
    EXPECT_TRUE(e.report());  // a world of one: this rank reports it
    const std::string msg = e.what();
    EXPECT_NE(msg.find("nothing/train_*.bin"), std::string::npos) << msg;
    EXPECT_NE(msg.find("data.train"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace feast
