from django.urls import path

from workers.api import PoolStatusView

urlpatterns = [
    path("", PoolStatusView.as_view(), name="pool-status"),
]
