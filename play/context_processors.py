"""What every page of a signed-in player knows: whether a model will write their stories."""

from stories.accounts import ai_settings


def model_setup(request) -> dict:
    """``model_missing``: no model of their own and no demo model (the AI cannot write yet);
    ``model_demo``: the site's demo model plays for them. One read a page, for signed-in players."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    ai = ai_settings.ai_settings_of(user_id=user.pk)
    own = bool(ai.endpoint_url and ai.model)
    demo = ai_settings.demo_available()
    return {"model_missing": not own and not demo, "model_demo": not own and demo}
