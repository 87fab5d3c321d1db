/** Vitest setup file: after a file's last test, the PostgreSQL schemas it made are dropped. */
import { afterAll } from 'vitest';
import { dropTestSchemas } from './test-schemas.js';

afterAll(() => dropTestSchemas());
