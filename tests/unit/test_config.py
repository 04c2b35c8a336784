import logging
import os

import pydantic
import pytest

from core import defaults as d
from core.config import Settings
from core.config_load import ConfigError, load_settings

SEED_DEFAULTS = [
    ("base_url", "http://127.0.0.1:1933"),
    ("agent_prefix", ""),
    ("auto_capture", True),
    ("auto_recall", True),
    ("commit_token_threshold", 20000),
    ("commit_keep_recent_count", 10),
    ("recall_limit", 6),
    ("recall_score_threshold", 0.15),
    ("recall_max_injected_chars", 4000),
    ("recall_prefer_abstract", False),
    ("bypass_session_patterns", ()),
]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    for key in list(__import__("os").environ):
        if key.startswith("OVSTREAM_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)  # no config/ovstream.toml here


@pytest.mark.parametrize(("key", "value"), SEED_DEFAULTS)
def test_seed_defaults(key, value):
    assert getattr(load_settings(), key) == value


def test_toml_accepts_camel_and_snake(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text(
        '[ovstream]\nbaseUrl = "http://ov:1933/"\ncommit_token_threshold = 500\nbypassSessionPatterns = ["cron:**"]\n'
    )
    s = load_settings(f)
    assert s.base_url == "http://ov:1933"
    assert s.commit_token_threshold == 500
    assert s.bypass_session_patterns == ("cron:**",)


def test_environment_beats_file(tmp_path, monkeypatch):
    f = tmp_path / "c.toml"
    f.write_text("[ovstream]\nrecallLimit = 3\nshards = 2\n")
    monkeypatch.setenv("OVSTREAM_RECALL_LIMIT", "9")
    monkeypatch.setenv("OVSTREAM_BYPASS_SESSION_PATTERNS", "a:*, b")
    monkeypatch.setenv("OVSTREAM_REDIS_SENTINELS", "s1:26379, 10.0.0.2:26380")
    s = load_settings(f)
    assert (s.recall_limit, s.shards) == (9, 2)
    assert s.bypass_session_patterns == ("a:*", "b")
    assert s.sentinel_addresses == [("s1", 26379), ("10.0.0.2", 26380)]
    assert s.redacted_redis_url() == "mymaster (Sentinels s1:26379,10.0.0.2:26380)"  # what logs say


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"recallLimit": 0}, "recallLimit"),
        ({"base_url": "ftp://x"}, "base_url"),
        ({"redis_url": "http://x"}, "redis_url"),
        ({"recall_score_threshold": 2}, "recall_score_threshold"),
        ({"capture_batch": 10}, "capture_batch"),
        ({"unknownKey": 1}, "unknownKey"),
        ({"queueRedisUrl": "http://x"}, "queueRedisUrl"),
        ({"redisCluster": True}, "queueRedisUrl"),
        ({"redisCluster": True, "redisUrl": "fakeredis://", "queueRedisUrl": "redis://q"}, "redisCluster"),
        ({"redisSentinels": ["s1"]}, "redisSentinels"),
        ({"redisSentinels": ["s1:99999"]}, "redisSentinels"),
        ({"redisSentinels": ["s1:1"], "redisCluster": True, "queueRedisUrl": "redis://q"}, "redisSentinels"),
        ({"redisSentinels": ["s1:1"], "redisUrl": "fakeredis://"}, "redisSentinels"),
        ({"publishReplicas": -1}, "publishReplicas"),
    ],
)
def test_bad_values_name_the_key(overrides, named):
    with pytest.raises(ConfigError) as err:
        load_settings(**overrides)
    assert named in str(err.value)


def test_missing_explicit_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "nope.toml")


def test_broken_toml(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("[ovstream\n")
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(f)


def test_settings_are_frozen_and_embedded_flag():
    s = Settings(redis_url="fakeredis://")
    assert s.embedded_redis
    assert not Settings().embedded_redis
    with pytest.raises(pydantic.ValidationError):
        s.shards = 3  # type: ignore[misc]


def test_a_settings_default_is_written_once_on_its_field():
    from core.ov.client import OVClient

    assert Settings().capture_lease_ms == Settings.model_fields["capture_lease_ms"].default == 10_000
    client = OVClient("http://ov")  # the client's defaults are the settings'
    assert (client.timeout, client.retries, client.account) == (
        Settings().ov_timeout_s,
        Settings().ov_retries,
        Settings().account,
    )
    assert not [name for name in vars(d) if name.isupper() and name.lower() in Settings.model_fields]


def test_commit_queue_is_named_after_the_key_prefix_unless_set():
    assert Settings().commit_queue_name == "ovstream-commits"  # the default prefix keeps the old name
    assert Settings(key_prefix="blue").commit_queue_name == "blue-commits"
    assert Settings(key_prefix="blue", commit_queue="jobs").commit_queue_name == "jobs"


def test_a_retired_key_still_loads_with_a_warning(tmp_path, caplog):
    path = tmp_path / "ovstream.toml"
    path.write_text("[ovstream]\nclaimIdleMs = 60000\nshards = 3\n")
    with caplog.at_level("WARNING", logger="core.config"):
        settings = load_settings(path)
    assert settings.shards == 3
    assert "claimIdleMs" in caplog.text and "no longer used" in caplog.text


SECRETS = {
    "api_key": "ov-key-0123456789-secret",
    "user_api_keys": {"alice": "ov-key-of-alice-secret"},
    "rpc_token": "rpc-token-0123456789-secret",
    "rpc_credentials": {"ops": {"token": "rpc-token-of-ops-secret", "ovKeys": ["ov-key-of-ops-secret"]}},
    "redis_url": "redis://:redis-password-secret@redis.internal:6379/0",
}


def test_secrets_never_show_in_a_repr_or_the_redis_url_logged():
    settings = Settings(**SECRETS)
    shown = repr(settings) + str(settings) + repr(settings.credentials)
    assert "secret" not in shown
    assert settings.redacted_redis_url() == "redis://redis.internal:6379/0"
    assert settings.credentials["ops"].ov_keys == ("ov-key-of-ops-secret",)


def test_secrets_are_read_from_files(tmp_path, monkeypatch):
    (tmp_path / "key").write_text("ov-key-from-a-file\n")
    (tmp_path / "creds.json").write_text('{"ops": {"token": "rpc-token-from-a-file-0123"}}')
    (tmp_path / "token").write_text("rpc-token-from-env-file-01\n")
    config = tmp_path / "ovstream.toml"
    config.write_text(f'apiKeyFile = "{tmp_path / "key"}"\nrpc_credentials_file = "{tmp_path / "creds.json"}"\n')
    monkeypatch.setenv("OVSTREAM_RPC_TOKEN_FILE", str(tmp_path / "token"))
    settings = load_settings(config)
    assert settings.api_key == "ov-key-from-a-file"
    assert settings.rpc_token == "rpc-token-from-env-file-01"
    assert settings.credentials["ops"].token == "rpc-token-from-a-file-0123"
    monkeypatch.setenv("OVSTREAM_API_KEY_FILE", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="api_key_file: cannot read"):
        load_settings(config)


@pytest.mark.parametrize(
    "credential",
    [{"token": "short"}, {"token": "long-enough-token-0123", "unknown": 1}, {"ovKeys": ["k"]}],
)
def test_a_bad_credential_names_the_key_and_not_the_token(credential):
    with pytest.raises(ConfigError) as info:
        load_settings(None, rpc_credentials={"ops": credential})
    assert "rpc_credentials" in str(info.value) and "long-enough-token" not in str(info.value)


def test_the_commit_queue_shares_the_store_unless_told_otherwise():
    assert load_settings(redisUrl="redis://a:6379/0").rq_redis_url == "redis://a:6379/0"
    both = load_settings(redisUrl="redis://a:6379", redisCluster=True, queueRedisUrl="redis://q:6379/0")
    assert (both.redis_cluster, both.rq_redis_url) == (True, "redis://q:6379/0")


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"OVSTREAM_SHARDS": "abc"}, "invalid configuration: OVSTREAM_SHARDS: Input should be a valid integer"),
        (
            {"OVSTREAM_REDIS_URL": "http://x"},
            "invalid configuration: OVSTREAM_REDIS_URL: Value error, must be a redis://",
        ),
        ({"OVSTREAM_USER_API_KEYS": "notjson"}, "invalid configuration: OVSTREAM_USER_API_KEYS: not a JSON object"),
        ({"OVSTREAM_RECALL_SCORE_THRESHOLD": "2"}, "invalid configuration: OVSTREAM_RECALL_SCORE_THRESHOLD: Input"),
    ],
)
def test_a_bad_variable_is_named_as_the_user_set_it_in_one_line(monkeypatch, env: dict[str, str], said: str) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert str(err.value).startswith(said) and "\n" not in str(err.value), str(err.value)
    assert "EnvSettingsSource" not in str(err.value)


def test_a_bad_file_key_is_named_with_its_file_and_the_nearest_setting(tmp_path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('recalLimit = 3\nshards = "x"\n')
    with pytest.raises(ConfigError) as err:
        load_settings(f)
    lines = str(err.value).splitlines()
    assert lines[0] == "invalid configuration:"
    assert f"  recalLimit (in {f}): not an ovstream setting (did you mean recallLimit?)" in lines
    assert any(line.startswith(f"  shards (in {f}): Input should be a valid integer") for line in lines)


@pytest.mark.parametrize(
    ("name", "warned"),
    [
        (
            "OVSTREAM_RECAL_LIMIT",
            "OVSTREAM_RECAL_LIMIT is not an ovstream setting (did you mean OVSTREAM_RECALL_LIMIT?)",
        ),
        ("OVSTREAM_NOTHING_LIKE_IT", "OVSTREAM_NOTHING_LIKE_IT is not an ovstream setting; it is ignored"),
        ("OVSTREAM_RECALL_LIMIT", None),  # a setting
        ("OVSTREAM_API_KEY_FILE", None),  # a secret's file
        ("OVSTREAM_CONFIG", None),  # the config path
        ("OVSTREAM_REQUIRE_HOST", None),  # ./test's
    ],
)
def test_an_unknown_variable_is_warned_about_with_the_nearest_setting(
    monkeypatch, caplog, tmp_path, name: str, warned: str | None
) -> None:
    for key in [k for k in os.environ if k.startswith("OVSTREAM_")]:
        monkeypatch.delenv(key)
    value = str(tmp_path / "c.toml") if name == "OVSTREAM_CONFIG" else "3"
    if name == "OVSTREAM_CONFIG":
        (tmp_path / "c.toml").write_text("")
    if name == "OVSTREAM_API_KEY_FILE":
        (tmp_path / "k").write_text("key")
        value = str(tmp_path / "k")
    monkeypatch.setenv(name, value)
    with caplog.at_level(logging.WARNING, logger="core.config"):
        load_settings()
    said = [r.getMessage() for r in caplog.records if "OVSTREAM_" in r.getMessage()]
    if warned is None:
        assert said == []
    else:
        assert len(said) == 1 and said[0].startswith(warned), said
