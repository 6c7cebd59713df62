# The two commands of the README.
.PHONY: setup example test bench
setup:
	scripts/setup.sh
example:
	scripts/example.sh
test:
	scripts/test.sh
