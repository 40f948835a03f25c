# The modal backend's test infrastructure: the local fake of Modal's gRPC API
# (tests/fakes/modal_server.py), started once per machine as a background process; reused while it
# answers, replaced when its code changed. No cloud, no credentials needed.
.PHONY: modal-fake

modal-fake: venv
	@$(PY) -c 'from tests.infra import modal; print("modal fake:", modal.provision()["server_url"])'

test-infra: modal-fake
bench-infra: modal-fake
