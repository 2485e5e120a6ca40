#include <gtest/gtest.h>

#include <cmath>

#include "backend/ref/executor.h"
#include "ir/error.h"
#include "ir/verify.h"
#include "train/tiny_lm.h"

namespace keel {
namespace {

TEST(TinyLm, WholeStepIsOneProgramAndTheLossFalls) {
  set_default_executor(ref::make_executor());
  TinyLmConfig c;
  c.steps = 15;
  c.batch = 32;
  TinyLmRun run = run_tiny_lm(c, tiny_lm_default_text());
  ASSERT_EQ(run.losses.size(), 15u);
  EXPECT_EQ(run.traces, 1);
  EXPECT_NEAR(run.losses.front(), std::log(256.0), 0.3);  // near-uniform predictions at start
  EXPECT_LT(run.losses.back(), run.losses.front() - 0.5);
  EXPECT_NO_THROW(verify(run.step_graph));
  // Forward, backward and update live in the one program: its outputs are loss + 5 params.
  EXPECT_EQ(run.step_graph.outputs().size(), 6u);
}

TEST(TinyLm, SameSeedSameLosses) {
  set_default_executor(ref::make_executor());
  TinyLmConfig c;
  c.steps = 3;
  c.batch = 8;
  EXPECT_EQ(run_tiny_lm(c, tiny_lm_default_text()).losses,
            run_tiny_lm(c, tiny_lm_default_text()).losses);
}

TEST(TinyLm, TooShortTextIsAnError) {
  set_default_executor(ref::make_executor());
  EXPECT_THROW(run_tiny_lm(TinyLmConfig{}, "ab"), Error);
}

}  // namespace
}  // namespace keel
