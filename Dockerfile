# The image of docker-compose.yml's Spark master, workers and job driver: Python, a JRE, the
# PostgreSQL JDBC driver and oncelog with its spark extra, whose pyspark wheel also runs the master
# and the workers (spark-class). Driver and executors thus share one Spark version and one Python
# at one path, which Spark's Python tasks need.
#
#   docker compose build
#   docker compose build --build-arg PYSPARK_VERSION=4.1.0   # pin the Spark version
FROM python:3.11-slim-bookworm

# Spark 4 runs on Java 17 or later; Debian's JDBC driver is the one the host set-up installs.
# The slim image has no /usr/share/man/man1, where the JRE's postinst (update-alternatives) links
# its man pages: without the folder the install fails.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless libpostgresql-jdbc-java procps \
    && rm -rf /var/lib/apt/lists/*

# Empty: the newest pyspark the spark extra allows.
ARG PYSPARK_VERSION=""
WORKDIR /opt/oncelog
COPY . .
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir ".[spark]" ${PYSPARK_VERSION:+"pyspark==${PYSPARK_VERSION}"} \
    && ln -s "$(/opt/venv/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" /opt/spark

# spark-class in the foreground (the containers' main process); the JDBC jar found without a flag.
ENV PATH=/opt/venv/bin:$PATH \
    SPARK_HOME=/opt/spark \
    SPARK_NO_DAEMONIZE=1 \
    ONCELOG_JDBC_JAR=/usr/share/java/postgresql.jar
