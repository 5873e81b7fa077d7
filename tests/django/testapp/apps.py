from django.apps import AppConfig


class TestAppConfig(AppConfig):
    name = "tests.django.testapp"
    label = "testapp"
