#include "train/inference_model.h"

#include <optional>
#include <vector>

#include "io/hf_checkpoint.h"
#include "model/hf_config.h"
#include "model/init_weights.h"
#include "model/peft_adapter.h"
#include "ops/backend.h"

namespace shardtrain {

InferenceModel load_inference_model(const std::string& model_dir, DeviceChoice device,
                                    const std::string& adapter_dir) {
  const HfCheckpoint checkpoint = HfCheckpoint::open(model_dir);
  const ModelConfig config = read_hf_config(checkpoint.config_json_path());
  LoraConfig lora;
  if (!adapter_dir.empty()) {
    lora.adapter = adapter_dir;
    lora = resolve_lora_config(lora, model_dir);
  }
  InferenceModel result;
  result.ops = make_ops(device);
  result.model = std::make_unique<DecoderModel>(config, *result.ops, lora);
  const ParamLayout& layout = result.model->layout();
  std::optional<PeftAdapterWeights> adapter;
  if (lora.enabled) adapter = PeftAdapterWeights::open(adapter_dir, layout);
  result.units = std::make_unique<LocalUnits>(*result.ops, layout,
                                              /*with_optimizer_state=*/false);
  std::vector<float> values;
  for (int u = 0; u < result.model->unit_count(); ++u) {
    values.assign(layout.units[u].numel, 0.0f);
    for (const ParamSpec& spec : layout.units[u].params) {
      float* dst = values.data() + spec.offset;
      if (is_lora_param(spec)) {
        adapter->read_range(spec, 0, spec.numel(), dst);
      } else {
        checkpoint.read_into_f32(spec.name, spec.shape, dst);
      }
    }
    result.units->upload_master(u, values.data());
  }
  result.units->refresh_compute_params();
  return result;
}

}  // namespace shardtrain
