// Every case of the table of backend op cases (backend/check/op_cases.h, the table `trainer
// check-backend` runs too) on the CPU backend in float32 against the float64 reference (the CPU
// op templates instantiated for double), each op a test over all its cases (a process per case
// would cost more than the cases): every output within fp32's tolerance on
// max |test - ref| / max |ref|, the case and the worst element printed when not. Then the table itself:
// every op of the list compared, a case that throws or an op left out fails, an injected error
// fails its op alone; and the CPU backend's operand checks and bfloat16 rounding.
#include <gtest/gtest.h>

#include <memory>
#include <ostream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/check/case_builders.h"
#include "backend/check/checked_ops.h"
#include "backend/check/op_cases.h"
#include "backend/check/run_checks.h"

namespace feast {
namespace {

using check::CheckRow;
using check::OpCase;

// The rows of the cases run against the CPU backend.
std::vector<CheckRow> run_on_cpu(const std::vector<OpCase>& cases, const std::string& inject_error = "") {
  const std::unique_ptr<Backend> cpu = make_backend("cpu");
  std::vector<CheckRow> rows;
  check::run_checks(*cpu, {1, inject_error}, [&](const CheckRow& row) { rows.push_back(row); }, cases);
  return rows;
}

std::string describe(const CheckRow& r) {
  std::ostringstream os;
  os << r.op << " " << r.output << " (" << r.shape << ", " << r.dtype << "): ";
  if (!r.error.empty()) return os.str() + r.error;
  os << "max rel err " << r.max_rel_err << " > " << r.tolerance << "; element " << r.worst << " is " << r.test_value
     << ", float64 reference " << r.ref_value;
  return os.str();
}

class BackendOps : public ::testing::TestWithParam<std::string> {};

TEST_P(BackendOps, MatchesFloat64) {
  const std::unique_ptr<Backend> cpu = make_backend("cpu");
  int cases = 0;
  for (const OpCase& c : check::op_cases()) {
    if (c.op != GetParam()) continue;
    SCOPED_TRACE(c.op + " " + c.shape);
    ++cases;
    std::vector<CheckRow> rows;
    check::CheckHarness harness(*cpu, 1, "", [&](const CheckRow& row) { rows.push_back(row); });
    check::run_case(harness, c);
    ASSERT_FALSE(rows.empty()) << "the case compared nothing";
    for (const CheckRow& r : rows) {
      EXPECT_EQ(r.op, c.op);
      EXPECT_TRUE(r.ok) << describe(r);
    }
  }
  EXPECT_GT(cases, 0) << GetParam() << " has no case";
}

INSTANTIATE_TEST_SUITE_P(Cpu, BackendOps, ::testing::ValuesIn(check::checked_ops()),
                         [](const ::testing::TestParamInfo<std::string>& op) { return op.param; });

TEST(BackendOpsTable, ComparesEveryOpOfTheList) {
  std::set<std::string> in_table;
  for (const OpCase& c : check::op_cases()) {
    EXPECT_TRUE(check::is_checked_op(c.op)) << c.op << " is not an op of the list";
    in_table.insert(c.op);
  }
  EXPECT_EQ(check::checked_ops().size(), 49u);
  for (const std::string& op : check::checked_ops()) EXPECT_TRUE(in_table.count(op)) << op << " has no case";
}

TEST(BackendOpsTable, AnOpLeftOutOrACaseThatThrowsFails) {
  const OpCase throws{"gelu_backward", "n=3", check::HeldTo::kComputeDtype, [](check::CheckHarness& h) {
                        h.compare_values("dinp", {1.0}, {1.0});
                        throw std::runtime_error("out of memory\nsecond line");
                      }};
  const std::vector<CheckRow> rows = run_on_cpu({check::gelu_forward_case(7), throws});
  std::set<std::string> never;
  for (const CheckRow& r : rows)
    if (r.error == "never compared") {
      EXPECT_FALSE(r.ok);
      never.insert(r.op);
    }
  EXPECT_EQ(never.size(), check::checked_ops().size() - 2);
  EXPECT_FALSE(never.count("gelu_forward") || never.count("gelu_backward"));
  ASSERT_GE(rows.size(), 3u);
  EXPECT_TRUE(rows[0].ok && rows[1].ok) << describe(rows[0]) << "; " << describe(rows[1]);
  EXPECT_EQ(rows[2].op, "gelu_backward");
  EXPECT_EQ(rows[2].shape, "n=3");
  EXPECT_EQ(rows[2].error, "threw: out of memory");
  EXPECT_FALSE(rows[2].ok);
}

TEST(BackendOpsTable, AnInjectedErrorFailsTheFirstOutputOfItsOpAlone) {
  const std::vector<OpCase> cases = {check::layernorm_forward_case(3, 5), check::layernorm_forward_case(2, 9),
                                     check::gelu_forward_case(7)};
  const std::vector<CheckRow> rows = run_on_cpu(cases, "layernorm_forward");
  std::vector<std::string> failed;
  for (const CheckRow& r : rows)
    if (!r.ok && r.error.empty()) failed.push_back(r.op + " " + r.output + " " + r.shape);
  EXPECT_EQ(failed, std::vector<std::string>{"layernorm_forward out N=3 C=5"});
}

TEST(BackendOpsCpu, OperandsAreChecked) {
  const std::unique_ptr<Backend> be = make_backend("cpu");
  Tensor small = be->allocate(be->compute_dtype(), 10), ints32 = be->allocate(DType::kInt32, 100);
  Tensor out = be->allocate(be->compute_dtype(), 100);
  EXPECT_THROW(be->gelu_forward(out.view(), small.view(), 100), Error);   // too few elements
  EXPECT_THROW(be->gelu_forward(out.view(), ints32.view(), 100), Error);  // wrong dtype
  EXPECT_THROW(be->matmul_forward(out.view(), TensorView{}, small.view(), TensorView{}, 1, 1, 1), Error);  // missing
}

// float32 -> bfloat16 -> float32 rounds to 8 significant bits, to nearest even (the values
// torch.bfloat16 gives).
TEST(BackendOpsCpu, CastRoundsAsTorchBfloat16) {
  const std::unique_ptr<Backend> be = make_backend("cpu");
  const std::vector<float> values = {1.0f, 1.00390625f, 1.01171875f, -3.14159265f, 65504.0f, 1e-20f};
  const std::vector<double> rounded = {1.0, 1.0, 1.015625, -3.140625, 65536.0, 1.0005576689441423e-20};
  Tensor f = be->allocate(DType::kFloat32, values.size()), h = be->allocate(DType::kBFloat16, values.size()),
         back = be->allocate(DType::kFloat32, values.size());
  be->copy(f.view(), host_view(values.data(), values.size()));
  be->cast(h.view(), f.view());
  be->cast(back.view(), h.view());
  std::vector<float> got(values.size());
  be->copy(host_view(got.data(), got.size()), back.view());
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(double(got[i]), rounded[i]) << values[i];
}

}  // namespace
}  // namespace feast
