"""The tests' connections reach the test database, the one subprocesses and
``pg_dump`` are given, whatever opened a connection before it was created."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection

pytestmark = [pytest.mark.dbsensitive, pytest.mark.django_db]


def test_the_connection_in_use_is_the_test_database_the_settings_name() -> None:
    name = str(connection.settings_dict["NAME"])
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT current_database()")
            assert cursor.fetchone()[0] == name
        else:
            cursor.execute("PRAGMA database_list")
            main = next(row for row in cursor.fetchall() if row[1] == "main")
            assert Path(main[2]).resolve() == Path(name).resolve()
