"""The editor's endpoint setting is ``kevin.baseUrl``, the CLI's ``--base-url`` and the config's
``base_url``; the old ``kevin.endpoint`` is still read, with a note to rename it."""

from __future__ import annotations

from kevin_agent.lsp.settings import deprecation_notes, parse_settings


def test_base_url_is_the_setting_and_reaches_the_backend_flags():
    settings, problems = parse_settings({"kevin": {"baseUrl": "http://gpu-box:9000/v1"}})
    assert problems == [] and settings.backend_flags()["base_url"] == "http://gpu-box:9000/v1"
    assert deprecation_notes({"kevin": {"baseUrl": "http://gpu-box:9000/v1"}}) == []


def test_the_old_endpoint_name_is_read_with_a_note():
    raw = {"kevin": {"endpoint": "http://old:8000/v1"}}
    settings, problems = parse_settings(raw)
    assert problems == [] and settings.backend_flags()["base_url"] == "http://old:8000/v1"
    assert deprecation_notes(raw) == ["kevin.endpoint is deprecated: rename it kevin.baseUrl (as the CLI's "
                                      "--base-url and the config's base_url)"]


def test_base_url_beats_the_old_name_and_bad_values_name_the_key_written():
    both = {"kevin": {"endpoint": "http://old:8000/v1", "baseUrl": "http://new:8000/v1"}}
    assert parse_settings(both)[0].backend_flags()["base_url"] == "http://new:8000/v1"
    assert parse_settings({"kevin": {"baseUrl": "localhost:8000"}})[1] == [
        "kevin.baseUrl = 'localhost:8000' (expected an http:// or https:// URL)"]
    assert parse_settings({"kevin": {"endpoint": "localhost:8000"}})[1] == [
        "kevin.endpoint = 'localhost:8000' (expected an http:// or https:// URL)"]
