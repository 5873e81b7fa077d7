"""Settings the django-stubs mypy plugin loads to type the models (never used to run anything).

It installs every app whose code mypy checks: the awa app, the test project's
app and the shop example's app (``examples/django_shop`` is on mypy's path).
"""

SECRET_KEY = "typing-only"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "unused"}}
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "awa_django",
    "tests.django.testapp",
    "shop",
]
