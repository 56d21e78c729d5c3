#include "launch/doctor/checkpoint_need.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/config.h"
#include "core/error.h"
#include "model/param_layout.h"
#include "train/job_model_config.h"
#include "train/train_config.h"

namespace shardtrain::doctor {

JobCheckpoints job_checkpoints_from_config(const std::string& config_path) {
  TrainConfig config;
  ConfigSchema schema;
  config.register_config(schema);
  schema.load_toml_file(config_path);
  const int64_t params =
      make_param_layout(read_job_model_config(config, "--config " + config_path + ": "))
          .parameter_count();
  constexpr int64_t kBytesPerParam = 12;  // fp32 master + exp_avg + exp_avg_sq
  const int64_t copies = std::max<int64_t>(config.train.keep_checkpoints, 1) + 1;
  JobCheckpoints job;
  job.checkpoint_dir = config.train.checkpoint_dir;
  job.need.bytes = static_cast<uint64_t>(params * kBytesPerParam * copies);
  job.need.how = fmt::format("{} params x {} B x ({} kept + 1 being written)", params,
                             kBytesPerParam, copies - 1);
  return job;
}

}  // namespace shardtrain::doctor
