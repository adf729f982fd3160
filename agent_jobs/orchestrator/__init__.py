"""Claim -> run one step for the current status -> commit. Owns every status write's decision;
talks to the database only through `Store` and to the broker only through the `Publisher` port."""
