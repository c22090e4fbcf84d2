"""What every page of a signed-in player knows: whether a model will write their stories."""

from config import local_model
from stories.accounts import ai_settings


def model_setup(request) -> dict:
    """``model_missing``: no model of their own and no demo model (the AI cannot write yet);
    ``model_demo``: the site's demo model plays for them; ``model_demo_waiting``: the local demo
    model is not ready yet, and the sentence that says when it will be. One read a page, for
    signed-in players."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    ai = ai_settings.ai_settings_of(user_id=user.pk)
    own = bool(ai.endpoint_url and ai.model)
    demo = ai_settings.demo_available()
    out = {"model_missing": not own and not demo, "model_demo": not own and demo}
    local = ai_settings.demo_local_status() if out["model_demo"] else None
    if local is not None and local["state"] != "ready":
        out["model_demo_waiting"] = local_model.describe(local)
        out["model_demo_failed"] = local["state"] == "failed"
    return out
