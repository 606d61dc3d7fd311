"""The vision families Tandem serves through mlx-vlm (engine/models/vision.py),
by config `model_type`; no MLX here, so the model library can ask."""

SERVED = {"smolvlm": "SmolVLM", "idefics3": "Idefics3", "qwen2_5_vl": "Qwen2.5-VL",
          "qwen2_vl": "Qwen2-VL"}
MROPE = ("qwen2_5_vl", "qwen2_vl")  # positions per request: MRopeVisionModel
# An image at most this many times as wide as tall, or as tall as wide: Qwen's
# processor fails past it ("absolute aspect ratio must be smaller than 200");
# images.py refuses such an image from its header, and model_view keeps a
# scaled image within it.
MAX_ASPECT = 200
