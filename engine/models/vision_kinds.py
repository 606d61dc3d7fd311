"""The vision families Tandem serves through mlx-vlm (engine/models/vision.py),
by config `model_type`; no MLX here, so the model library can ask."""

SERVED = {"smolvlm": "SmolVLM", "idefics3": "Idefics3", "qwen2_5_vl": "Qwen2.5-VL",
          "qwen2_vl": "Qwen2-VL"}
MROPE = ("qwen2_5_vl", "qwen2_vl")  # positions per request: MRopeVisionModel
