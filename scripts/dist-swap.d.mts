export declare const CHUNKS_MANIFEST: string;
export declare function keepPreviousChunks(dist: string, staging: string, chunks: string[]): string[];
export declare function swapIn(staging: string, dist: string, retired: string): void;
export declare function removeLeftovers(root: string): string[];
