"""The settings module reads the environment, refuses bad values by name, and its
production profile passes `manage.py check --deploy` cleanly."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROD_ENV = {
    "DEBUG": "0",
    "SECRET_KEY": "k" * 30 + "-a-long-random-production-secret-value-1234567890",
    "ALLOWED_HOSTS": "portal.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://portal.example.com",
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/portal",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
}


def run_manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if k not in PROD_ENV and not k.startswith("PORTAL_")
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, "PORTAL_NO_WORKER": "1", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_production_settings_pass_the_deploy_check_with_no_warnings():
    result = run_manage("check", "--deploy", "--fail-level", "DEBUG", env=PROD_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


@pytest.mark.slow
def test_the_readme_production_environment_passes_the_deploy_check_with_no_warnings():
    from tests.readme import production_steps

    result = run_manage("check", "--deploy", "--fail-level", "DEBUG", env=production_steps().env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("DEBUG", "maybe", "DEBUG must be a boolean"),
        ("DATABASE_URL", "mysql://x/y", "DATABASE_URL must start with postgres://"),
        ("DATABASE_URL", "postgres://127.0.0.1:5432/", "DATABASE_URL names no database"),
        ("REDIS_URL", "localhost:6379", "REDIS_URL must start with redis://"),
        ("PORTAL_MAX_INPUT_BYTES", "lots", "PORTAL_MAX_INPUT_BYTES must be a whole number"),
        (
            "CSRF_TRUSTED_ORIGINS",
            "portal.example.com",
            "CSRF_TRUSTED_ORIGINS entries need a scheme",
        ),
        ("PORTAL_API_RATE", "lots", "PORTAL_API_RATE must be count/period like 120/m"),
        ("PORTAL_API_RATE", "0/m", "PORTAL_API_RATE must be count/period like 120/m"),
        ("PORTAL_LOGIN_FAILURE_LIMIT", "0", "PORTAL_LOGIN_FAILURE_LIMIT must be at least 1"),
        ("PORTAL_LOGIN_COOLOFF_MINUTES", "soon", "PORTAL_LOGIN_COOLOFF_MINUTES must be a whole"),
        ("PORTAL_CHANNEL_PREFIX", "acme portal", "PORTAL_CHANNEL_PREFIX must be 1 to 50"),
    ],
)
def test_a_bad_setting_is_refused_naming_the_variable(variable, value, expected):
    result = run_manage("check", env={variable: value})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert expected in result.stderr


@pytest.mark.slow
def test_debug_off_without_a_secret_key_is_refused():
    env = {k: v for k, v in PROD_ENV.items() if k != "SECRET_KEY"}
    result = run_manage("check", env=env)
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off" in result.stderr


def test_database_urls_are_parsed_into_django_settings():
    from portal.settings import database_from_url

    pg = database_from_url("postgres://alice:s%40cret@db.internal:6543/portal?sslmode=require")
    assert pg["ENGINE"] == "django.db.backends.postgresql"
    assert (pg["NAME"], pg["USER"], pg["PASSWORD"], pg["HOST"], pg["PORT"]) == (
        "portal",
        "alice",
        "s@cret",
        "db.internal",
        "6543",
    )
    assert pg["OPTIONS"] == {"sslmode": "require", "options": "-c synchronous_commit=on"}
    own = database_from_url("postgres://h/portal?options=-c%20statement_timeout%3D5s")
    assert own["OPTIONS"]["options"] == "-c statement_timeout=5s -c synchronous_commit=on"
    assert database_from_url("sqlite:///demo.db")["NAME"] == "demo.db"
    assert database_from_url("sqlite:////tmp/demo.db")["NAME"] == "/tmp/demo.db"


@pytest.mark.slow
def test_redis_url_selects_the_pub_sub_channel_layer():
    # Broadcast-only groups fan out faster over Redis pub/sub (see settings.py).
    result = run_manage(
        "shell",
        "-c",
        "from django.conf import settings; print(settings.CHANNEL_LAYERS['default'])",
        env={"REDIS_URL": "redis://127.0.0.1:6379/0"},
    )
    assert result.returncode == 0, result.stderr
    assert "channels_redis.pubsub.RedisPubSubChannelLayer" in result.stdout
    assert "'address': 'redis://127.0.0.1:6379/0'" in result.stdout


def test_each_database_gets_a_channel_prefix_of_its_own():
    from portal.settings import database_from_url, default_channel_prefix

    def prefix(url: str, suffix: str = "") -> str:
        return default_channel_prefix(database_from_url(url), test_suffix=suffix)

    a = prefix("postgres://u@db.internal:5432/portal")
    assert a.startswith("portal-")
    assert len(a) < 50
    assert a == prefix("postgres://other-user:pw@db.internal:5432/portal")  # same database
    others = [
        prefix("postgres://u@db.internal:5432/portal_staging"),
        prefix("postgres://u@db2.internal:5432/portal"),
        prefix("postgres://u@db.internal:6432/portal"),
        prefix("postgres://u@db.internal:5432/portal", "_ci"),
    ]
    assert len({a, *others}) == 5
