"""What the serving tests share: an `openai` client of a server, an image's pixels, one request's answer."""

import base64
import io

import numpy as np
import openai
import PIL.Image


def client(url: str, key: str = "unused", timeout: float = 60) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=timeout)


def pixels(b64: str) -> np.ndarray:
    return np.asarray(PIL.Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB"))


def answer(api: openai.OpenAI, model: str, seed: int, prompt: str = "a red circle") -> np.ndarray | int:
    """The pixels of the image the server makes for `prompt` with `seed`, or 429 when it refused (saying
    when to try again)."""
    try:
        out = api.images.generate(
            model=model, prompt=prompt, response_format="b64_json", extra_body={"seed": seed}
        )
    except openai.RateLimitError as refused:
        assert int(refused.response.headers["retry-after"]) >= 1
        return 429
    return pixels(out.data[0].b64_json)
