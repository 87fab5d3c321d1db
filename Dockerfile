# bot-homeserver: a small non-root image; the database lives on the /data volume.
#   docker build -t bot-homeserver .
#   docker run -p 8008:8008 -v bhs-data:/data -e BOT_HOMESERVER_SERVER_NAME=example.org bot-homeserver
#   docker exec -it <container> bot-homeserver create-bot hello
#
# A host folder instead of the named volume (-v /srv/bhs:/data) must be writable by the image's
# `node` user (uid 1000): `sudo chown -R 1000:1000 /srv/bhs`, or `docker run --user` its owner.
# The entrypoint says so, instead of SQLite's "unable to open database file".
#
# Another port: -e BOT_HOMESERVER_LISTEN__PORT=9000 -p 9000:9000. The environment wins over a
# config file's listen.port, and the health check reads the same variable.
#
# The base image is a tag, which moves with every Node 24 and Debian update. To pin it, look up
# the digest of the tag's multi-platform index at build time and pass it:
#   docker buildx imagetools inspect node:24-bookworm-slim     (the "Digest:" line)
#   docker build --build-arg NODE_IMAGE=node:24-bookworm-slim@sha256:<digest> -t bot-homeserver .
# (or write it into the ARG below and let Dependabot or Renovate keep it current).
ARG NODE_IMAGE=node:24-bookworm-slim

# 1. The build: TypeScript and esbuild only, so no install scripts: nothing is compiled here.
FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
COPY stubs ./stubs
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY scripts ./scripts
COPY src ./src
COPY migrations ./migrations
RUN npm run build

# 2. The production dependencies, their native modules built once, for the Node that runs them.
# --omit=optional leaves out better-sqlite3-node20 (Node 20's SQLite driver; this image runs
# Node 24, which loads better-sqlite3 from its prebuilt binary). The compilers are for argon2 when
# its prebuilt binary does not fit the platform. bin/ is here for the `prepare` script, which
# does nothing without src/.
FROM ${NODE_IMAGE} AS deps
WORKDIR /app
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json ./
COPY bin ./bin
RUN npm ci --omit=dev --omit=optional --no-audit --no-fund

FROM ${NODE_IMAGE}
# MALLOC_MMAP_THRESHOLD_: argon2's 19 MiB per password hash stays a separate mapping, returned to
# the system when freed, instead of settling in glibc's per-thread pools (docs/configuration.md).
ENV NODE_ENV=production \
    MALLOC_MMAP_THRESHOLD_=131072 \
    BOT_HOMESERVER_LISTEN__HOST=0.0.0.0 \
    BOT_HOMESERVER_LISTEN__PORT=8008 \
    BOT_HOMESERVER_DATABASE__PATH=/data/homeserver.db
WORKDIR /app
COPY package.json ./
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY bin ./bin
COPY docker ./docker
COPY config.example.yaml ./
RUN ln -s /app/bin/bot-homeserver.js /usr/local/bin/bot-homeserver \
    && mkdir -p /data && chown node:node /data
USER node
VOLUME ["/data"]
EXPOSE 8008
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s CMD ["node", "/app/docker/healthcheck.mjs"]
ENTRYPOINT ["sh", "/app/docker/entrypoint.sh"]
# Set BOT_HOMESERVER_CONFIG=/data/homeserver.yaml (or mount a file) for a config file.
CMD ["node", "bin/bot-homeserver.js", "start"]
