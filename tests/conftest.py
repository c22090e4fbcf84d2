import pytest


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user(username="alice", password="alice-pass-123")


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user(username="bob", password="bob-pass-123")


@pytest.fixture
def charlie(django_user_model):
    """A user with no access to anything of alice's or bob's."""
    return django_user_model.objects.create_user(username="charlie", password="charlie-pass-123")
